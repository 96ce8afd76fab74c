"""The decode loop, scoring and memory sizing on a CUDA GPU: CUDA graphs captured and equal to eager steps, log μ
equal to the scorer's, greedy equal to `generate`, LoRA merged equal to the adapter, float32 weights under bf16
autocast decoding (graphed), the planner's reserve covering what the loop keeps, the authors-code filter on CUDA
inputs, a 151,936-entry vocabulary within its memory bound, and `train.micro_batch_rows: auto` keeping its promise."""

from __future__ import annotations

import copy

import pytest
import torch

from losses import build_loss
from node.generation.base import build_generator
from node.generation.config import GenerationConfig
from node.generation.decode import DecodeLoop
from node.generation.hf import HFGenerator
from node.models.builders import init_causal_lm
from node.models.config import ModelConfig
from node.models.device import place
from node.models.load import load_model
from node.round.config import TrainConfig
from node.round.sizing import plan_memory, step_cost
from node.round.logprobs import TokenRow, score_rows
from node.round.train import Row, loss_inputs
from tests.unit.node.test_decode_loop import _ids, _max_ratio_error, _prompts, greedy_matches_generate

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda", 0)


def _on_cuda(spec: str, **model) -> object:
    lm = load_model(ModelConfig(spec=spec, **model))
    place(lm.model, TrainConfig(device="cuda"))
    return lm


@pytest.fixture(scope="module")
def qwen():
    return _on_cuda("tiny-qwen2")


@pytest.mark.parametrize("top_p", [1.0, 0.8])
def test_graphed_loop_logprobs_equal_the_scorers(qwen, top_p):
    gen = HFGenerator(qwen.model, qwen.tokenizer, GenerationConfig(temperature=0.7, top_p=top_p, max_new_tokens=24))
    assert "CUDA graphs" in gen.describe()
    prompts = _prompts(qwen)
    torch.manual_seed(0)
    res = gen.generate(prompts, n=4)
    assert all(d.graph is not None for d in gen.loop._decoders.values()), "the decode step was not captured"
    assert gen.decode_mode == "graphs", gen.decode_mode
    assert _max_ratio_error(qwen.model, qwen, res, prompts, 0.7) <= 1e-4


def test_graph_replays_equal_eager_steps(qwen):
    ids = _ids(qwen, _prompts(qwen))
    kw = dict(max_new_tokens=20, temperature=1.0, top_p=1.0, eos_id=-1, pad_id=qwen.tokenizer.pad_token_id,
              greedy=True)
    graphed, eager = DecodeLoop(cuda_graphs=True), DecodeLoop(cuda_graphs=False)
    a, b = graphed.run(qwen.model, ids, **kw), eager.run(qwen.model, ids, **kw)
    assert next(iter(graphed._decoders.values())).graph is not None
    assert a.tokens.device.type == "cpu" and a.tokens.tolist() == b.tokens.tolist()
    torch.testing.assert_close(a.logprobs, b.logprobs, rtol=0, atol=1e-5)
    again = graphed.run(qwen.model, ids, **kw)  # a second call replays the same graph from a reset cache
    assert again.tokens.tolist() == a.tokens.tolist()


def test_greedy_equals_generate_on_cuda(qwen):
    greedy_matches_generate(qwen, _prompts(qwen))


@pytest.mark.parametrize("merge", [True, False])
def test_lora_on_cuda_equals_the_adapter(merge):
    lm = _on_cuda("tiny-qwen2", lora={"r": 4, "alpha": 8})
    with torch.no_grad():
        for name, p in lm.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    gen = HFGenerator(lm.model, lm.tokenizer, GenerationConfig(temperature=0.8, max_new_tokens=20,
                                                               hf={"merge_lora": merge}))
    prompts = _prompts(lm)
    torch.manual_seed(0)
    assert _max_ratio_error(lm.model, lm, gen.generate(prompts, n=3), prompts, 0.8) <= 1e-4


def test_bf16_generation_stays_on_policy(qwen):
    lm = copy.deepcopy(qwen)
    lm.model.to(torch.bfloat16)
    gen = HFGenerator(lm.model, lm.tokenizer, GenerationConfig(max_new_tokens=24))
    prompts = _prompts(lm)
    torch.manual_seed(0)
    assert _max_ratio_error(lm.model, lm, gen.generate(prompts, n=4), prompts, 1.0) <= 0.1


def test_fp32_weights_under_bf16_autocast_decode_on_cuda(qwen):
    """float32 weights under bf16 autocast (bench.speed.gpu's fp32-autocast): graphed, on policy (issue 51 item 1)."""
    lm = copy.deepcopy(qwen)
    place(lm.model, TrainConfig(device="cuda", autocast="bfloat16"))
    gen = HFGenerator(lm.model, lm.tokenizer, GenerationConfig(max_new_tokens=24))
    prompts = _prompts(lm)
    torch.manual_seed(0)
    res = gen.generate(prompts, n=4)
    assert gen.decode_mode == "graphs", gen.decode_mode
    assert _max_ratio_error(lm.model, lm, res, prompts, 1.0) <= 0.1


def test_the_reserve_covers_what_the_loop_keeps(qwen):
    """What the planner sets aside for the decode loop (HFGenerator.reserve_bytes: KV caches, graphs' pools, a
    step's logits) covers what two captured decoders (a round's rows and the evaluation's) really keep."""
    model, tok = _large_vocab_model(qwen), qwen.tokenizer
    gen = HFGenerator(model, tok, GenerationConfig(max_new_tokens=64))
    ids = [tok(f"<|user|>\nWhat is {i} + 1?<|end|>\n<|assistant|>\n", add_special_tokens=False)["input_ids"]
           for i in range(64)]
    longest = max(map(len, ids)) + 64
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    kw = dict(max_new_tokens=64, temperature=1.0, top_p=1.0, eos_id=-1, pad_id=tok.pad_token_id)
    gen.loop.run(model, ids, **kw)
    gen.loop.run(model, ids[:8], **kw)
    torch.cuda.synchronize()
    assert gen.decode_mode == "graphs" and len(gen.loop._decoders) == 2
    assert torch.cuda.max_memory_allocated() - base <= gen.reserve_bytes(64, longest)


def test_the_authors_code_filter_on_cuda():
    from tests.unit.losses.test_losses_gradients import filter_inputs

    inputs = filter_inputs()
    for k, v in vars(inputs).items():
        if isinstance(v, torch.Tensor):
            setattr(inputs, k, v.to(CUDA))
    out = build_loss("f-tis", g=1.0, filter="authors-code")(inputs)
    assert out.loss.device.type == "cuda" and out.metrics["filtered_frac"] == 0.25


def _large_vocab_model(tiny):
    config = copy.deepcopy(tiny.model.config)
    config.vocab_size = 151_936
    return init_causal_lm(config, seed=0).to(CUDA, torch.bfloat16)


def test_151936_vocabulary_memory_on_cuda(qwen):
    model, tok = _large_vocab_model(qwen), qwen.tokenizer
    rows, steps = 64, 128
    bound = rows * steps * 151_936 * 4 / 8  # an eighth of [B, L, V] in float32 (593.5 MiB; the scorer's chunk ≤ half)
    batch = [tok(f"<|user|>\nWhat is {i} + 1?<|end|>\n<|assistant|>\n", add_special_tokens=False)["input_ids"]
             for i in range(rows)]
    loop = DecodeLoop()
    kw = dict(temperature=1.0, top_p=1.0, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id)
    loop.run(model, batch, max_new_tokens=2, **kw)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = loop.run(model, batch, max_new_tokens=steps, **kw)
    token_rows = [TokenRow(p, r) for p, r in zip(batch, out.tokens.tolist())]
    with torch.no_grad():
        score_rows(model, token_rows, 1.0, tok.pad_token_id)
    train = [Row(r, [0.0] * steps, 0.0, True, (-1.0) ** i, i // 8, False) for i, r in enumerate(token_rows[:16])]
    build_loss("grpo")(loss_inputs(model.train(), train, 1.0, tok.pad_token_id)).loss.backward()
    torch.cuda.synchronize()
    assert out.tokens.shape == (rows, steps)
    assert torch.cuda.max_memory_allocated() - base < bound


def test_auto_micro_batch_keeps_its_promise(qwen):
    """The plan's micro-batch, run for real at the probed length, peaks within the budget it was sized for."""
    model, tok = _large_vocab_model(qwen), qwen.tokenizer
    _, one_row = step_cost(model, 1, 1024, 960, tok.pad_token_id)
    budget = 3 * one_row
    cfg = TrainConfig(device="cuda", micro_batch_rows="auto", gradient_checkpointing="auto")
    plan = plan_memory(model, cfg, row_tokens=1024, completion_tokens=960, step_rows=4096, pad_id=tok.pad_token_id,
                       budget=budget)
    assert 1 < plan.micro_batch_rows < 4096
    _, peak = step_cost(model, plan.micro_batch_rows, 1024, 960, tok.pad_token_id)
    assert peak <= budget


def test_auto_backend_on_a_gpu(qwen):
    gen = build_generator(GenerationConfig(backend="auto"), qwen.model, qwen.tokenizer)
    try:
        import vllm  # noqa: F401

        assert gen.choice.startswith("generation backend vllm (vllm ")
    except ImportError:
        assert gen.choice.startswith("generation backend hf (vllm does not import")
    finally:
        if hasattr(gen, "close"):
            gen.close()
