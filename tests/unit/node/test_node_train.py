"""Generation ↔ scoring agreement, rows in our tokenization, DASH filter, micro-batches, one step."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from losses import build_loss
from node.generation.config import GenerationConfig
from node.generation.hf import HFGenerator
from node.round.config import TrainConfig
from node.round.groups import Group, advantages
from node.round.logprobs import TokenRow, score_rows
from node.round.train import (
    Row,
    build_optimizer,
    build_rows,
    dash_filter,
    micro_batches,
    train_step,
)
from node.tasks.source import Task, render_prompt
from protocols.records import TaskRef

QUESTIONS = ["What is 2 + 3?", "Spell this word backward: banana", "Sort: 3, 1, 2 and explain"]


def _task(i: int) -> Task:
    return Task(TaskRef("chain_sum", {}, 0, i), QUESTIONS[i % len(QUESTIONS)], "5", {})


def _prompt(lm):
    return lambda task: render_prompt(lm.tokenizer, task.question, None)


def _generate(lm, temperature=0.7, n=4, max_new_tokens=12, seed=0):
    torch.manual_seed(seed)
    gen = HFGenerator(lm.model, lm.tokenizer, GenerationConfig(temperature=temperature, max_new_tokens=max_new_tokens))
    tasks = [_task(i) for i in range(3)]
    return tasks, gen.generate([_prompt(lm)(t) for t in tasks], n=n)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampling_logprobs_equal_a_scoring_forward_pass(tiny_qwen, temperature):
    tasks, res = _generate(tiny_qwen, temperature)
    tok = tiny_qwen.tokenizer
    rows, beh = [], []
    for t, group in zip(tasks, res.groups):
        prompt_ids = tok(_prompt(tiny_qwen)(t), add_special_tokens=False)["input_ids"]
        for c in group:
            assert len(c.token_ids) == len(c.logprobs) > 0
            rows.append(TokenRow(prompt_ids, list(c.token_ids)))
            beh.append(torch.tensor(c.logprobs))
    with torch.no_grad():
        logp, mask = score_rows(tiny_qwen.model, rows, temperature, tok.pad_token_id)
    for i, b in enumerate(beh):
        # prompts of different lengths were left-padded at generation, right-padded here
        torch.testing.assert_close(logp[i, : len(b)], b, rtol=0, atol=1e-4)
        assert mask[i].sum() == len(b)


def test_completions_stop_at_eos_and_keep_it(tiny_qwen):
    _, res = _generate(tiny_qwen, 1.0, n=8, max_new_tokens=40)
    eos = tiny_qwen.tokenizer.eos_token_id
    for c in (c for g in res.groups for c in g):
        assert eos not in c.token_ids[:-1]
        assert (c.finish_reason == "stop") == (c.token_ids[-1] == eos)
        assert c.finish_reason == "stop" or len(c.token_ids) == 40


def _groups(lm, tasks, res, source="self", aligned=True):
    out = []
    for i, (t, comps) in enumerate(zip(tasks, res.groups)):
        rewards = [float(j % 2) for j in range(len(comps))]  # alternate 0/1 so every group informs
        out.append(Group(t, comps, rewards, advantages(rewards), source=source, aligned=aligned))
    return out


def test_on_policy_step_has_unit_is_weights_and_moves_the_weights(tiny_qwen):
    lm = copy.deepcopy(tiny_qwen)
    tasks, res = _generate(lm, 1.0)
    rows = build_rows(_groups(lm, tasks, res), lm.tokenizer, _prompt(lm))
    assert len(rows) == 12
    before = [p.detach().clone() for p in lm.model.parameters()]
    opt = build_optimizer(lm.model, TrainConfig(lr=1e-3))
    step = train_step(lm.model, opt, rows, build_loss("grpo"), TrainConfig(lr=1e-3, micro_batch_rows=4),
                      temperature=1.0, pad_id=lm.tokenizer.pad_token_id)
    assert step.stepped and step.rows == 12
    # on-policy: exp(logp - logp_beh) = 1 to float precision
    assert step.metrics.is_weight_mean == pytest.approx(1.0, abs=1e-4)
    assert step.metrics.is_weight_max == pytest.approx(1.0, abs=1e-4)
    assert step.metrics.tokens == sum(len(r.tokens.completion_ids) for r in rows)
    assert any(not torch.equal(a, b) for a, b in zip(before, lm.model.parameters()))


@pytest.mark.parametrize("loss", [{"name": "grpo"}, {"name": "grpo", "norm": "token"}, {"name": "grpo", "norm": "dr"},
                                  {"name": "gepo"}, {"name": "f-tis"}])
def test_micro_batching_gives_the_full_batch_gradient(tiny_qwen, loss):
    """Every normalisation divides by the whole step's totals, so the split cannot change the gradient;
    nor the metrics over peers' rows, which one micro-batch of four holds (the others must not dilute them)."""
    tasks, res = _generate(tiny_qwen, 1.0)
    rows = build_rows(_groups(tiny_qwen, tasks, res), tiny_qwen.tokenizer, _prompt(tiny_qwen))
    first = rows[0].group_id
    rows = [dataclasses.replace(r, external=r.group_id == first) for r in rows]  # one group is a peer's
    grads, metrics = [], []
    for mb in (100, 4):
        lm = copy.deepcopy(tiny_qwen)
        opt = torch.optim.SGD(lm.model.parameters(), lr=0.0)  # lr 0: keep grads comparable
        lm.model.zero_grad()
        cfg = TrainConfig(micro_batch_rows=mb, grad_clip=1e6)
        # capture gradients before the (no-op) step clears them
        captured = {}
        hook = opt.register_step_pre_hook(
            lambda o, a, k: captured.update({i: p.grad.clone() for i, p in enumerate(lm.model.parameters())}))
        step = train_step(lm.model, opt, rows, build_loss(**loss), cfg, temperature=1.0, pad_id=lm.tokenizer.pad_token_id)
        hook.remove()
        grads.append(captured)
        metrics.append(step.metrics.values())
    for i in grads[0]:
        torch.testing.assert_close(grads[0][i], grads[1][i], rtol=1e-4, atol=1e-6)
    for k in ("is_weight_external", "is_weight_external_share", "kl_beh_external", "kl_beh_local"):
        assert metrics[1][k] == pytest.approx(metrics[0][k], rel=1e-3, abs=1e-6), k
    assert metrics[0]["is_weight_external"] > 0.5  # on-policy rows: weight ≈ 1


def test_other_tokenizer_rows_are_retokenised_with_sequence_logprob(tiny_qwen, tiny_llama):
    assert tiny_qwen.fingerprint != tiny_llama.fingerprint
    tasks, res = _generate(tiny_llama, 1.0)  # a peer with another tokenizer generated these
    groups = _groups(tiny_llama, tasks, res, source="peer", aligned=False)
    rows = build_rows(groups, tiny_qwen.tokenizer, _prompt(tiny_qwen))
    comps = [c for g in res.groups for c in g]
    for r, c in zip(rows, comps):
        expect = tiny_qwen.tokenizer(c.text, add_special_tokens=False)["input_ids"]
        if c.finish_reason == "stop":
            expect = expect + [tiny_qwen.tokenizer.eos_token_id]
        assert r.tokens.completion_ids == expect
        assert r.logp_beh_seq == pytest.approx(sum(c.logprobs))
        assert not r.aligned and r.external
    lm = copy.deepcopy(tiny_qwen)
    step = train_step(lm.model, build_optimizer(lm.model, TrainConfig()), rows, build_loss("tis"),
                      TrainConfig(), temperature=1.0, pad_id=lm.tokenizer.pad_token_id)
    assert step.stepped and all(torch.isfinite(torch.tensor(v)) for v in step.metrics.values().values())


def _row(adv: float, gid: int) -> Row:
    return Row(TokenRow([1], [2, 3]), [-0.1, -0.1], -0.2, True, adv, gid, False)


def test_dash_filter_drops_small_advantages_but_keeps_one():
    rows = [_row(0.05, 0), _row(-0.5, 0), _row(0.09, 1)]
    assert [r.advantage for r in dash_filter(rows, 0.1)] == [-0.5]
    assert [r.advantage for r in dash_filter(rows[::2], 0.1)] == [0.09]  # none pass: keep the largest |A|
    assert dash_filter(rows, 0.0) == rows


def test_micro_batches_keep_groups_whole():
    rows = [_row(1, 0)] * 3 + [_row(1, 1)] * 3 + [_row(1, 2)] * 2
    batches = micro_batches(rows, 4)
    assert [len(b) for b in batches] == [3, 3, 2]
    assert [len(b) for b in micro_batches(rows, 6)] == [6, 2]
    assert all(len({r.group_id for r in b}) == len(set(r.group_id for r in b)) for b in batches)


def _steps_with(lm, tasks, res, cfg: TrainConfig, loss=None, reference=None):
    rows = build_rows(_groups(lm, tasks, res), lm.tokenizer, _prompt(lm))
    before = [p.detach().clone() for p in lm.model.parameters()]
    step = train_step(lm.model, build_optimizer(lm.model, cfg), rows, loss or build_loss("grpo"), cfg,
                      temperature=1.0, pad_id=lm.tokenizer.pad_token_id, reference=reference)
    moved = any(not torch.equal(a, b) for a, b in zip(before, lm.model.parameters()))
    return step, moved


def test_ppo_epochs_and_mini_batches_take_that_many_steps_against_a_fixed_pi_old(tiny_qwen):
    lm = copy.deepcopy(tiny_qwen)
    tasks, res = _generate(lm, 1.0)  # 3 groups of 4
    step, moved = _steps_with(lm, tasks, res, TrainConfig(lr=1e-2, epochs=2, mini_batches=3, micro_batch_rows=4))
    assert step.steps == 6 and moved and step.metrics.steps == 6.0
    # π_old is fixed for the round: after the first steps π_θ has moved away from it
    assert step.metrics.kl_old > 0.0
    one, _ = _steps_with(copy.deepcopy(tiny_qwen), tasks, res, TrainConfig(lr=1e-2))
    assert one.steps == 1 and one.metrics.kl_old == 0.0  # one step: π_old = sg(π_θ) of its own forward


def test_mini_batches_split_whole_groups_evenly():
    from node.round.train import mini_batches

    rows = [_row(1.0, g) for g in range(6) for _ in range(4)]
    parts = mini_batches(rows, 3)
    assert [len(p) for p in parts] == [8, 8, 8]
    assert all(len({r.group_id for r in p} & {r.group_id for r in q}) == 0 for p in parts for q in parts if p is not q)
    assert len(mini_batches(rows, 10)) == 6  # never more mini-batches than groups


def test_learning_rate_zero_freezes_the_policy(tiny_qwen):
    """The control of every learning claim: the same rounds with the policy frozen."""
    lm = copy.deepcopy(tiny_qwen)
    tasks, res = _generate(lm, 1.0)
    step, moved = _steps_with(lm, tasks, res, TrainConfig(lr=0.0))
    assert step.stepped and not moved


@pytest.mark.parametrize("lora", [False, True])
def test_reference_kl_is_zero_at_the_start_and_grows_as_the_policy_moves(tiny_qwen, lora):
    from node.models.config import LoraSpec, ModelConfig
    from node.models.load import load_model
    from node.round.reference import build_reference

    lm = load_model(ModelConfig(spec="tiny-qwen2", lora=LoraSpec(r=4))) if lora else copy.deepcopy(tiny_qwen)
    tasks, res = _generate(lm, 1.0)
    loss = build_loss("grpo", beta=0.1)
    assert loss.needs_reference
    reference = build_reference(lm.model)  # LoRA: the adapter disabled; full: a frozen copy
    cfg = TrainConfig(lr=5e-2)
    first, _ = _steps_with(lm, tasks, res, cfg, loss, reference)
    assert first.metrics.kl_ref == pytest.approx(0.0, abs=1e-6)  # π_θ = π_ref before any step
    for _ in range(3):
        later, _ = _steps_with(lm, tasks, res, cfg, loss, reference)
    assert later.metrics.kl_ref > 1e-4
    with pytest.raises(ValueError, match="reference"):
        _steps_with(lm, tasks, res, cfg, loss, None)
