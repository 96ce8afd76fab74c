"""bench/teacher_imitation.py (arm Ti of bench/teacher.py): F-TIS plus imitation of external rows with A > 0."""

from __future__ import annotations

import torch
from torch.testing import assert_close

from bench.teacher_imitation import fis_with_imitation
from losses import build_loss
from tests.unit.test_losses_values import LOGP, MASK, make_inputs

BEH = [[-1.2, -2.0, -0.9], [-0.5, -1.0, 0.0]]


def _inputs(adv, external):
    return make_inputs(LOGP, BEH, MASK, adv, group_ids=[0, 1], external=external)


def test_without_an_external_row_with_positive_advantage_it_is_f_tis():
    for adv, ext in (([1.0, -0.5], [False, True]), ([1.0, 0.5], [False, False])):
        assert_close(fis_with_imitation(_inputs(adv, ext), lam=1.0).loss, build_loss("f-tis")(_inputs(adv, ext)).loss)


def test_an_external_row_with_positive_advantage_is_pushed_up_by_its_mean_log_prob():
    inputs = _inputs([-0.5, 1.0], [False, True])
    base = build_loss("f-tis")(_inputs([-0.5, 1.0], [False, True])).loss
    out = fis_with_imitation(inputs, lam=0.5)
    seq_mean_row1 = (LOGP[1][0] + LOGP[1][1]) / 2  # row 1's two completion tokens
    assert_close(out.loss, base - 0.5 * seq_mean_row1 / 2)  # divided by the step's 2 rows
    out.loss.backward()
    plain = _inputs([-0.5, 1.0], [False, True])
    build_loss("f-tis")(plain).loss.backward()
    extra = inputs.logp.grad - plain.logp.grad  # the imitation term's gradient: −0.5 / (2 rows · 2 tokens)
    assert_close(extra, torch.tensor([[0.0, 0.0, 0.0], [-0.125, -0.125, 0.0]]))
    assert out.metrics["imitation_share"] == 0.5
