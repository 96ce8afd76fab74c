"""losses/imitation.py (`train.imitate`, `train.imitate_rows`): a loss plus imitation of peers' rows whose advantage is positive."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from torch.testing import assert_close

from losses import build_loss
from losses.imitation import with_imitation
from node.round.config import TrainConfig
from node.round.logprobs import score_rows
from node.round.train import build_rows, train_step
from tests.unit.losses.test_losses_values import LOGP, MASK, make_inputs
from tests.unit.node.test_node_train import _generate, _groups, _prompt

BEH = [[-1.2, -2.0, -0.9], [-0.5, -1.0, 0.0]]


def _inputs(adv, external):
    return make_inputs(LOGP, BEH, MASK, adv, group_ids=[0, 1], external=external)


def test_without_an_external_row_with_positive_advantage_it_is_the_base_loss():
    fn = with_imitation(build_loss("f-tis"), 1.0)
    for adv, ext in (([1.0, -0.5], [False, True]), ([1.0, 0.5], [False, False])):
        assert_close(fn(_inputs(adv, ext)).loss, build_loss("f-tis")(_inputs(adv, ext)).loss)


def test_an_external_row_with_positive_advantage_is_pushed_up_by_its_mean_log_prob():
    inputs = _inputs([-0.5, 1.0], [False, True])
    base = build_loss("f-tis")(_inputs([-0.5, 1.0], [False, True])).loss
    out = with_imitation(build_loss("f-tis"), 0.5)(inputs)
    seq_mean_row1 = (LOGP[1][0] + LOGP[1][1]) / 2  # row 1's two completion tokens
    assert_close(out.loss, base - 0.5 * seq_mean_row1 / 2)  # divided by the step's 2 rows
    out.loss.backward()
    plain = _inputs([-0.5, 1.0], [False, True])
    build_loss("f-tis")(plain).loss.backward()
    extra = inputs.logp.grad - plain.logp.grad  # the imitation term's gradient: −0.5 / (2 rows · 2 tokens)
    assert_close(extra, torch.tensor([[0.0, 0.0, 0.0], [-0.125, -0.125, 0.0]]))
    assert out.metrics["imitation_share_external"] == 1.0  # the one peer row is imitated


def test_all_rows_imitates_our_own_better_answers_too():
    inputs = _inputs([1.0, -0.5], [False, True])  # our row 0 scored above its group, the peer's row did not
    base = build_loss("f-tis")(_inputs([1.0, -0.5], [False, True])).loss
    assert_close(with_imitation(build_loss("f-tis"), 1.0)(inputs).loss, base)  # peers only: nothing to imitate
    out = with_imitation(build_loss("f-tis"), 1.0, rows="all")(_inputs([1.0, -0.5], [False, True]))
    assert_close(out.loss, base - (LOGP[0][0] + LOGP[0][1] + LOGP[0][2]) / 3 / 2)
    assert out.metrics["imitation_share_local"] == 1.0 and out.metrics["imitation_share_external"] == 0.0
    with pytest.raises(ValueError):
        with_imitation(build_loss("f-tis"), 1.0, rows="mine")


def test_off_is_the_loss_itself_and_a_reference_need_is_kept():
    base = build_loss("f-tis")
    assert with_imitation(base, 0.0) is base
    assert with_imitation(build_loss("grpo", beta=0.1), 1.0).needs_reference
    assert not with_imitation(base, 1.0).needs_reference


def test_a_negative_or_huge_weight_is_refused():
    with pytest.raises(ValueError):
        TrainConfig(imitate=-1.0)
    with pytest.raises(ValueError):
        TrainConfig(imitate=1e6)


def _imitated_logp(lm, rows):
    peer_pos = [r for r in rows if r.external and r.advantage > 0]
    with torch.no_grad():
        logp, mask = score_rows(lm.model, [r.tokens for r in peer_pos], 1.0, lm.tokenizer.pad_token_id)
    return float(((logp * mask).sum(1) / mask.sum(1)).sum())


def _rows_with_one_peer_group(lm):
    """Three sampled groups of four with alternating 0/1 rewards, the first of them a peer's."""
    tasks, res = _generate(lm, 1.0)
    rows = build_rows(_groups(lm, tasks, res), lm.tokenizer, _prompt(lm))
    return [dataclasses.replace(r, external=r.group_id == rows[0].group_id) for r in rows]


@pytest.mark.parametrize("lr", [0.0, 0.05])
def test_a_training_step_raises_the_peers_better_answers_more_with_imitation(tiny_qwen, lr):
    """One SGD step on a peer's group and our own: the peer's above-mean answers gain more log-probability
    with the term than without it; with the policy frozen (lr 0) neither moves."""
    rows = _rows_with_one_peer_group(tiny_qwen)
    rises, shares = [], []
    for lam in (0.0, 1.0):
        lm = copy.deepcopy(tiny_qwen)
        before = _imitated_logp(lm, rows)
        opt = torch.optim.SGD(lm.model.parameters(), lr=lr)
        step = train_step(lm.model, opt, rows, with_imitation(build_loss("f-tis"), lam),
                          TrainConfig(micro_batch_rows=4, grad_clip=1e6), temperature=1.0,
                          pad_id=lm.tokenizer.pad_token_id)
        rises.append(_imitated_logp(lm, rows) - before)
        shares.append(step.metrics.imitation_share_external)
    assert shares == [None, 0.5]  # rewards alternate 0/1: half of the peer's rows score above their mean
    if lr == 0.0:
        assert rises == [0.0, 0.0]
    else:
        assert rises[1] > rises[0] + 1e-3, rises


def test_micro_batching_gives_the_full_batch_gradient_and_share(tiny_qwen):
    """The term divides by the step's totals like every loss, so splitting the step changes neither the
    gradient nor the share of peers' rows imitated (one micro-batch holds them all)."""
    rows = _rows_with_one_peer_group(tiny_qwen)
    grads, shares = [], []
    for mb in (100, 4):
        lm = copy.deepcopy(tiny_qwen)
        opt = torch.optim.SGD(lm.model.parameters(), lr=0.0)
        captured = {}
        hook = opt.register_step_pre_hook(
            lambda o, a, k: captured.update({i: p.grad.clone() for i, p in enumerate(lm.model.parameters())}))
        step = train_step(lm.model, opt, rows, with_imitation(build_loss("f-tis"), 1.0, rows="all"),
                          TrainConfig(micro_batch_rows=mb, grad_clip=1e6), temperature=1.0,
                          pad_id=lm.tokenizer.pad_token_id)
        hook.remove()
        grads.append(captured)
        shares.append((step.metrics.imitation_share_external, step.metrics.imitation_share_local))
    for i in grads[0]:
        assert_close(grads[0][i], grads[1][i], rtol=1e-4, atol=1e-6)
    assert shares[0] == pytest.approx(shares[1]) and shares[0] == pytest.approx((0.5, 0.5))


def test_an_imitable_mask_keeps_a_positive_row_out_of_the_term():
    """`imitable` False (below the own bar) leaves a peer's above-mean row to the base loss alone."""
    inputs = _inputs([-0.5, 1.0], [False, True])
    base = build_loss("f-tis")(_inputs([-0.5, 1.0], [False, True])).loss
    barred = dataclasses.replace(inputs, imitable=torch.tensor([True, False]))
    out = with_imitation(build_loss("f-tis"), 1.0)(barred)
    assert_close(out.loss, base)
    assert out.metrics["imitation_share_external"] == 0.0 and out.metrics["imitation_barred_external"] == 1.0
    kept = with_imitation(build_loss("f-tis"), 1.0)(inputs).metrics
    assert kept["imitation_share_external"] == 1.0 and "imitation_barred_external" not in kept


def test_the_own_bar_drops_a_weaker_peers_best_answers_and_keeps_a_stronger_ones(tiny_qwen):
    """imitate_bar own: a peer's answer is imitated only if it beats its group and the mean reward of our own
    rows in the step. Our rows score 0.5/1.0 (mean 0.75); a weak peer's 0.1/0.3 (its best, 0.3, is above its
    group but below us) is barred; a strong peer's 0.5/1.0 keeps its 1.0s; with the group bar both are kept."""
    from node.round.groups import Group, advantages
    from node.round.steps import imitate_bar

    tasks, res = _generate(tiny_qwen, 1.0)
    def group(i, source, lo, hi):
        rewards = [lo if j % 2 == 0 else hi for j in range(len(res.groups[i]))]
        return Group(tasks[i], res.groups[i], rewards, advantages(rewards), source=source)
    groups = [group(0, "self", 0.5, 1.0), group(1, "weak", 0.1, 0.3), group(2, "strong", 0.5, 1.0)]
    own = TrainConfig(imitate=1.0)
    assert imitate_bar(groups, own) == pytest.approx(0.75)
    assert imitate_bar(groups, TrainConfig(imitate=1.0, imitate_bar="group")) is None
    assert imitate_bar(groups, TrainConfig(imitate=0.0)) is None  # imitation off: no bar
    assert imitate_bar(groups[1:], own) is None  # no own rows in the step (a learner)
    rows = build_rows(groups, tiny_qwen.tokenizer, _prompt(tiny_qwen), imitate_bar=imitate_bar(groups, own))
    imitated = {(r.group_id, r.imitable and r.advantage > 0) for r in rows}
    assert imitated == {(0, True), (0, False), (1, False), (2, True), (2, False)}
    plain = build_rows(groups, tiny_qwen.tokenizer, _prompt(tiny_qwen))
    assert all(r.imitable for r in plain)
