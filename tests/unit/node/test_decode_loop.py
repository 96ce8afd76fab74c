"""The `hf` backend's decode loop (node.generation.decode, node.generation.hf): its log μ equal the scorer's log π
on the same tokens (on-policy ratio 1) with and without top_p, with LoRA merged and through the adapter; greedy
decoding gives `generate`'s tokens; EOS, max-length and left-padding cases; the backend `auto` choice."""

from __future__ import annotations

import copy
import sys
import types

import pytest
import torch
from transformers import GenerationConfig as HFGenerationConfig

from node.generation.base import build_generator, choose_backend
from node.generation.config import GenerationConfig
from node.generation.decode import DecodeLoop
from node.generation.hf import HFGenerator
from node.models.config import ModelConfig
from node.models.load import load_model
from node.round.logprobs import TokenRow, score_rows
from node.tasks.source import render_prompt

QUESTIONS = ["What is 2 + 3?", "Spell this word backward: banana", "Sort: 3, 1, 2 and explain why", "Hi"]


def _prompts(lm) -> list[str]:
    return [render_prompt(lm.tokenizer, q, None) for q in QUESTIONS]


def _ids(lm, prompts) -> list[list[int]]:
    return [lm.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]


def _max_ratio_error(model, lm, res, prompts, temperature) -> float:
    """max |log π − log μ| over every token of every completion (π: the scorer on `model`)."""
    rows, beh = [], []
    for ids, group in zip(_ids(lm, prompts), res.groups):
        for c in group:
            assert len(c.token_ids) == len(c.logprobs) > 0
            rows.append(TokenRow(ids, list(c.token_ids)))
            beh.append(torch.tensor(c.logprobs))
    with torch.no_grad():
        logp, mask = score_rows(model, rows, temperature, lm.tokenizer.pad_token_id)
    for i, b in enumerate(beh):
        assert mask[i].sum() == len(b)
    return max(float((logp[i, : len(b)] - b).abs().max()) for i, b in enumerate(beh))


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 1.0), (1.0, 0.8), (0.6, 0.9)])
@pytest.mark.parametrize("which", ["tiny_qwen", "tiny_llama"])
def test_loop_logprobs_equal_the_scorers(request, which, temperature, top_p):
    lm = request.getfixturevalue(which)
    torch.manual_seed(0)
    gen = HFGenerator(lm.model, lm.tokenizer, GenerationConfig(temperature=temperature, top_p=top_p,
                                                               max_new_tokens=24))
    prompts = _prompts(lm)  # four lengths: left padding in one batch
    res = gen.generate(prompts, n=4)
    assert res.new_tokens == sum(len(c.token_ids) for g in res.groups for c in g) > 0
    assert _max_ratio_error(lm.model, lm, res, prompts, temperature) <= 1e-4


@pytest.fixture(scope="module")
def lora_lm():
    """tiny-qwen2 with a LoRA adapter whose B is not zero (a fresh adapter is the identity)."""
    lm = load_model(ModelConfig(spec="tiny-qwen2", lora={"r": 4, "alpha": 8}))
    with torch.no_grad():
        g = torch.Generator().manual_seed(1)
        for name, p in lm.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return lm


@pytest.mark.parametrize("merge", [True, False], ids=["merged", "through-adapter"])
@pytest.mark.parametrize("top_p", [1.0, 0.8])
def test_lora_generation_logprobs_equal_the_adapters(lora_lm, merge, top_p):
    lm = copy.deepcopy(lora_lm)
    base = {k: v.clone() for k, v in lm.model.state_dict().items()}
    gen = HFGenerator(lm.model, lm.tokenizer, GenerationConfig(temperature=0.8, top_p=top_p, max_new_tokens=20,
                                                               hf={"merge_lora": merge}))
    assert ("merged into a copy" in gen.describe()) is merge
    prompts = _prompts(lm)
    torch.manual_seed(0)
    res = gen.generate(prompts, n=3)
    assert _max_ratio_error(lm.model, lm, res, prompts, 0.8) <= 1e-4
    # the training model itself is untouched by merging (no merge/unmerge drift)
    assert all(torch.equal(v, lm.model.state_dict()[k]) for k, v in base.items())
    # an optimizer step later, generation follows the new adapter (sync_weights after every step)
    with torch.no_grad():
        for name, p in lm.model.named_parameters():
            if "lora_A" in name:
                p.mul_(-1.5)
    gen.sync_weights(lm.model, 1)
    torch.manual_seed(1)
    res = gen.generate(prompts, n=3)
    assert _max_ratio_error(lm.model, lm, res, prompts, 0.8) <= 1e-4


def test_merged_copy_shares_what_lora_does_not_adapt(lora_lm):
    gen = HFGenerator(lora_lm.model, lora_lm.tokenizer, GenerationConfig())
    merged = gen.merged()
    inner = lora_lm.model.get_base_model()
    assert merged.model.embed_tokens.weight is inner.model.embed_tokens.weight
    q_merged, q_lora = merged.model.layers[0].self_attn.q_proj, inner.model.layers[0].self_attn.q_proj
    assert type(q_merged) is torch.nn.Linear and q_merged.weight is not q_lora.base_layer.weight
    torch.testing.assert_close(q_merged.weight, q_lora.base_layer.weight + q_lora.get_delta_weight("default"))


def _greedy_generate(lm, prompts, max_new_tokens) -> list[list[int]]:
    enc = lm.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    enc = enc.to(next(lm.model.parameters()).device)  # a CUDA model: only transformers ≥ 5.x would move them itself
    cfg = HFGenerationConfig(do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=lm.tokenizer.pad_token_id,
                             eos_token_id=lm.tokenizer.eos_token_id)
    with torch.no_grad():
        out = lm.model.eval().generate(**enc, generation_config=cfg)
    return out[:, enc["input_ids"].shape[1]:].tolist()


def _cut(row: list[int], eos: int) -> list[int]:
    return row[: row.index(eos) + 1] if eos in row else row


def greedy_matches_generate(lm, prompts, max_new_tokens=24) -> None:
    """Greedy decoding of the loop gives `generate`'s tokens, row by row (left-padded in one batch)."""
    eos = lm.tokenizer.eos_token_id
    ref = _greedy_generate(lm, prompts, max_new_tokens)
    out = DecodeLoop().run(lm.model, _ids(lm, prompts), max_new_tokens=max_new_tokens, temperature=1.0, top_p=1.0,
                           eos_id=eos, pad_id=lm.tokenizer.pad_token_id, greedy=True)
    assert [_cut(r, eos) for r in out.tokens.tolist()] == [_cut(r, eos) for r in ref]


def test_greedy_equals_generate_on_tiny_qwen2(tiny_qwen):
    greedy_matches_generate(tiny_qwen, _prompts(tiny_qwen))


def test_left_padding_changes_nothing(tiny_qwen):
    """Each prompt decoded alone and in one left-padded batch: the same greedy tokens and log μ."""
    lm, loop = tiny_qwen, DecodeLoop()
    ids = _ids(lm, _prompts(lm))
    assert len({len(x) for x in ids}) == len(ids)  # four lengths
    kw = dict(max_new_tokens=16, temperature=0.7, top_p=1.0, eos_id=-1, pad_id=lm.tokenizer.pad_token_id, greedy=True)
    together = loop.run(lm.model, ids, **kw)
    for i, x in enumerate(ids):
        alone = loop.run(lm.model, [x], **kw)
        assert together.tokens[i].tolist() == alone.tokens[0].tolist()
        torch.testing.assert_close(together.logprobs[i], alone.logprobs[0], rtol=0, atol=1e-5)


def test_eos_stops_a_row_and_the_loop_ends_when_every_row_has(tiny_qwen):
    lm, loop = tiny_qwen, DecodeLoop()
    ids = _ids(lm, _prompts(lm))
    kw = dict(temperature=1.0, top_p=1.0, pad_id=lm.tokenizer.pad_token_id, greedy=True)
    unstopped = loop.run(lm.model, ids, max_new_tokens=12, eos_id=-1, **kw)  # no EOS: all 12 tokens
    free = unstopped.tokens.tolist()
    assert all(len(r) == 12 for r in free)
    eos = free[0][3]  # row 0's fourth greedy token, as the EOS id
    out = loop.run(lm.model, ids, max_new_tokens=12, eos_id=eos, **kw)
    assert eos in free[0][:3] or not all(eos in r for r in free)  # rows stop at different steps: the batch shrinks
    for i, (row, ref) in enumerate(zip(out.tokens.tolist(), free)):
        stop = ref.index(eos) + 1 if eos in ref else len(ref)
        assert row[:stop] == ref[:stop]  # the same tokens up to and including the first EOS
        assert all(t == lm.tokenizer.pad_token_id for t in row[stop:])  # padding after it
        # the rows still running after others stopped (and were dropped from the batch) decode as before
        torch.testing.assert_close(out.logprobs[i, :stop], unstopped.logprobs[i, :stop], rtol=0, atol=1e-5)
    single = loop.run(lm.model, ids[:1], max_new_tokens=12, eos_id=eos, **kw)
    assert single.tokens.shape[1] == free[0].index(eos) + 1  # the loop ended as soon as the only row stopped


def test_completions_stop_at_eos_or_max_length(tiny_qwen):
    lm = tiny_qwen
    gen = HFGenerator(lm.model, lm.tokenizer, GenerationConfig(max_new_tokens=40))
    torch.manual_seed(3)
    res = gen.generate(_prompts(lm), n=8)
    eos = lm.tokenizer.eos_token_id
    completions = [c for g in res.groups for c in g]
    for c in completions:
        assert eos not in c.token_ids[:-1]
        assert (c.finish_reason == "stop") == (c.token_ids[-1] == eos)
        assert c.finish_reason == "stop" or len(c.token_ids) == 40
    assert {c.finish_reason for c in completions} == {"stop", "length"}  # both cases occurred


def test_auto_backend_choice(monkeypatch, tiny_qwen):
    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    auto = GenerationConfig(backend="auto")
    assert choose_backend(auto, cpu) == ("hf", "the policy is on cpu, not a GPU")
    assert choose_backend(GenerationConfig(backend="auto", top_p=0.9), gpu)[0] == "hf"
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm raises ImportError
    name, why = choose_backend(auto, gpu)
    assert name == "hf" and why.startswith("vllm does not import (ModuleNotFoundError")
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(__version__="0.32.0"))
    assert choose_backend(auto, gpu) == ("vllm", "vllm 0.32.0 imports and the policy is on cuda:0")
    assert choose_backend(GenerationConfig(backend="hf-generate"), gpu) == ("hf-generate", "as configured")
    gen = build_generator(auto, tiny_qwen.model, tiny_qwen.tokenizer)  # on this CPU
    assert isinstance(gen, HFGenerator) and gen.cfg.backend == "hf"
    assert gen.choice.startswith("generation backend hf (the policy is on cpu, not a GPU) · decode loop on cpu")
