"""The decode loop where transformers versions differ (node.generation.compat) and what it says about itself.

Run on 4.57.1 and 5.0.0 as well as the development version by `tests/version_matrix.py` (make test-versions):
  - float32 weights under bfloat16 autocast decode (4.57 / 5.0 crashed writing V into a K-typed StaticCache)
    and stay on policy against the scorer;
  - a decode step with grouped-query attention never expands the cache's K/V to the query heads (4.57 / 5.0
    did at every step), and the regrouped attention equals the expanded one;
  - a round whose prompts grow past a length bucket does not push out the other rows bucket's decoder (on a
    GPU: a second CUDA-graph capture of the held-out evaluation's shape);
  - `DecodeLoop.mode`: "eager: no CUDA", "eager: generation.hf.cuda_graphs is false", and a failed capture
    recorded as "eager: capture failed: <reason>" (a real capture attempt, which fails on a CPU).
"""

from __future__ import annotations

import copy

import pytest
import torch

from node.generation.config import GenerationConfig
from node.generation.decode import DecodeLoop, StaticDecoder
from node.generation.hf import HFGenerator
from node.models.device import place
from node.round.config import TrainConfig
from tests.unit.node.test_decode_loop import _ids, _max_ratio_error, _prompts


def test_fp32_weights_under_bf16_autocast_decode_on_policy(tiny_qwen):
    lm = copy.deepcopy(tiny_qwen)
    place(lm.model, TrainConfig(device="cpu", autocast="bfloat16"))
    assert next(lm.model.parameters()).dtype == torch.float32
    gen = HFGenerator(lm.model, lm.tokenizer, GenerationConfig(max_new_tokens=16))
    prompts = _prompts(lm)
    torch.manual_seed(0)
    res = gen.generate(prompts, n=2)  # transformers 4.57 / 5.0: index_copy_(): ... Float and BFloat16
    assert res.new_tokens > 0
    assert _max_ratio_error(lm.model, lm, res, prompts, 1.0) <= 0.1  # bf16 arithmetic on both sides


def test_decode_steps_read_the_kv_heads_unexpanded(tiny_qwen, monkeypatch):
    import transformers.integrations.sdpa_attention as sdpa

    config = tiny_qwen.model.config
    assert config.num_key_value_heads < config.num_attention_heads  # tiny-qwen2 has grouped-query attention
    calls = []
    real = sdpa.repeat_kv
    monkeypatch.setattr(sdpa, "repeat_kv", lambda h, n: calls.append(h.shape) or real(h, n))
    loop = DecodeLoop()
    kw = dict(temperature=1.0, top_p=1.0, eos_id=-1, pad_id=tiny_qwen.tokenizer.pad_token_id, greedy=True)
    out = loop.run(tiny_qwen.model, _ids(tiny_qwen, _prompts(tiny_qwen)), max_new_tokens=8, **kw)
    assert out.tokens.shape[1] == 8
    # the prefill (one forward of the prompts) expands K and V once per layer; the 7 decode steps never do
    assert len(calls) <= 2 * config.num_hidden_layers, f"{len(calls)} K/V expansions for 8 tokens"
    assert config._attn_implementation == "sdpa"  # restored after the loop


@pytest.mark.parametrize("per_head_mask", [False, True])
def test_regrouped_decode_attention_equals_the_expanded_one(per_head_mask):
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

    from node.generation.compat import decode_attention

    g = torch.Generator().manual_seed(0)
    batch, kv_heads, n_rep, length, dim = 3, 2, 6, 40, 16
    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal = n_rep, True
    q = torch.randn(batch, kv_heads * n_rep, 1, dim, generator=g)
    k, v = (torch.randn(batch, kv_heads, length, dim, generator=g) for _ in range(2))
    mask = torch.rand(batch, kv_heads * n_rep if per_head_mask else 1, 1, length, generator=g) > 0.3
    mask[..., 0] = True
    got, _ = decode_attention(module, q, k, v, mask, scaling=dim**-0.5)
    ref = torch.nn.functional.scaled_dot_product_attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), attn_mask=mask,
                                                           scale=dim**-0.5).transpose(1, 2)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
    prefill, _ = decode_attention(module, q.expand(-1, -1, 4, -1), k, v, None, scaling=dim**-0.5)  # not a step
    stock, _ = sdpa_attention_forward(module, q.expand(-1, -1, 4, -1), k, v, None, scaling=dim**-0.5)
    torch.testing.assert_close(prefill, stock, rtol=0, atol=0)


def test_a_longer_round_keeps_the_evaluations_decoder(tiny_qwen, monkeypatch):
    """Rows buckets 8 (the round) and 3 (the held-out evaluation) alternate while the round's prompts grow past a
    length bucket: the round's decoder is replaced by a longer one, the evaluation's is kept, and a shorter
    round later reuses the longer decoder — 3 decoders built, not 5 (each a CUDA-graph capture on a GPU). The
    loop keeps decoders with CUDA graphs only; here it is told to keep them as it does there."""
    import node.generation.decode as decode

    built = []

    class Counted(decode.StaticDecoder):
        def __init__(self, *args):
            built.append(args[1:3])
            super().__init__(*args)

    monkeypatch.setattr(decode, "StaticDecoder", Counted)
    lm, loop = tiny_qwen, DecodeLoop(keep=DecodeLoop.KEEP)
    short, eval_ids = _ids(lm, _prompts(lm)[:1]) * 8, _ids(lm, _prompts(lm)[:1]) * 3
    long = [ids + ids for ids in short]  # the longest prompt doubles: past the 16-token length bucket
    kw = dict(temperature=1.0, top_p=1.0, eos_id=-1, pad_id=lm.tokenizer.pad_token_id, greedy=True)
    for batch in (short, eval_ids, long, eval_ids, short, eval_ids):
        loop.run(lm.model, batch, max_new_tokens=4, **kw)
    assert len(built) == 3, built  # (rows, length) of each decoder built
    assert loop.built == 3
    assert sorted(rows for _, rows in loop._decoders) == [3, 8]


def test_eager_decoders_are_not_kept_between_batches(tiny_qwen):
    """Without CUDA graphs nothing is kept: the held-out evaluation's cache (200 rows of SmolLM2: ≈ 1.1 GB) is freed
    after it runs instead of being held through every round; the tokens are those of a loop that keeps them."""
    lm = tiny_qwen
    kw = dict(max_new_tokens=4, temperature=1.0, top_p=1.0, eos_id=-1, pad_id=lm.tokenizer.pad_token_id, greedy=True)
    batch = _ids(lm, _prompts(lm)[:1]) * 3
    fresh, kept = DecodeLoop(), DecodeLoop(keep=DecodeLoop.KEEP)
    assert fresh.keep(torch.device("cpu")) == 0 and fresh.keep(torch.device("cuda", 0)) == DecodeLoop.KEEP
    outs = [(fresh.run(lm.model, batch, **kw), kept.run(lm.model, batch, **kw)) for _ in range(2)]
    assert not fresh._decoders and len(kept._decoders) == 1
    assert fresh.built == 2 and kept.built == 1
    for a, b in outs:
        assert torch.equal(a.tokens, b.tokens)


def test_mode_says_eager_and_why(tiny_qwen):
    from node.generation.graphs import capture

    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert DecodeLoop().mode(cpu) == "eager: no CUDA"
    assert DecodeLoop(cuda_graphs=False).mode(cuda) == "eager: generation.hf.cuda_graphs is false"
    loop = DecodeLoop()
    assert loop.mode(cuda) == "graphs"  # nothing captured yet: graphs planned
    dec = StaticDecoder(tiny_qwen.model, 2, 16, cpu)
    capture(dec)  # a real attempt: without CUDA it fails, leaving a working eager decoder that says why
    assert dec.graph is None and dec.capture_error
    loop._decoders[(id(tiny_qwen.model), 2)] = dec
    assert loop.mode(cuda) == f"eager: capture failed: {dec.capture_error}"
    gen = HFGenerator(tiny_qwen.model, tiny_qwen.tokenizer, GenerationConfig())
    assert gen.decode_mode == "eager: no CUDA" and "eager steps (no CUDA)" in gen.describe()


def test_the_reserve_counts_the_graphs_memory_pools(tiny_qwen):
    """With CUDA graphs each kept decoder's captured step holds a private pool (its intermediates, the step's
    logits among them): the planner's reserve counts one per decoder (tests/gpu measures it on a GPU)."""
    from node.generation.decode import reserve_bytes

    model, rows = tiny_qwen.model, 16
    eager, graphed = (reserve_bytes(model, rows, 128, DecodeLoop.KEEP, graphs=g) for g in (False, True))
    assert graphed - eager >= DecodeLoop.KEEP * rows * model.config.vocab_size * 4
