"""Gradient limit cases: on-policy every loss is policy gradient; the F-TIS filter zeroes rows.

On-policy means log μ = log π_old = log π_θ (in value). Then every ratio is 1, nothing is
clipped or truncated (1 lies inside every clip range and C ≥ 1), and the gradient of each
surrogate w.r.t. log π_θ(y_{i,t}) is −A_i times its normalisation weight. With the seq
normalisation that weight is 1/(B·|y_i|), the same as pg's default, so the gradients
coincide with factor 1. grpo with norm=token coincides with pg with norm=token
(weight 1/Σ|y_i|). gspo's s_i = exp(mean_t log r) and gepo's w_i at ε_d = 1 (or with one row
per group, where E_q = q_i) have d/d log π_θ(y_{i,t}) = 1/|y_i| and a 1/B mean: factor 1 too.
"""

import math

import pytest
import torch
from torch.testing import assert_close

from losses import LossInputs, build_loss
from losses.base import behaviour_view
from losses.fis import filter_statistic, negative_advantage_filter
from tests.unit.losses.test_losses_values import make_inputs


def on_policy(aligned=(True, True, True, True)) -> LossInputs:
    """B=4, T=5, lengths 5, 3, 1, 4; groups {0, 1}, {2, 3}; A of both signs."""
    g = torch.Generator().manual_seed(0)
    logp = (-torch.rand(4, 5, generator=g) * 3.0).tolist()
    mask = [[1.0] * 5, [1.0] * 3 + [0.0] * 2, [1.0] + [0.0] * 4, [1.0] * 4 + [0.0]]
    beh_seq = [sum(lp for lp, m in zip(row, mrow) if m) for row, mrow in zip(logp, mask)]
    return make_inputs(
        logp, logp, mask, [1.2, -0.7, 0.4, -1.5],
        group_ids=[0, 0, 1, 1], aligned=list(aligned), beh_seq=beh_seq,
    )  # fmt: skip


def grad(name: str, inputs: LossInputs, **cfg) -> torch.Tensor:
    inputs.logp.grad = None
    build_loss(name, **cfg)(inputs).loss.backward()
    return inputs.logp.grad.clone()


def pg_reference_grad(inputs: LossInputs) -> torch.Tensor:
    # d/d log π_{i,t} of (1/B) Σ_i (1/|y_i|) Σ_t −log π_{i,t}·A_i = −A_i / (B·|y_i|) on the mask
    m = inputs.mask
    return -inputs.advantages[:, None] * m / (m.shape[0] * m.sum(dim=1, keepdim=True))


@pytest.mark.parametrize(
    "name, cfg",
    [
        ("grpo", {}),
        ("vis", {}),
        ("nois", {}),
        ("tis", {}),
        ("f-nois", {}),
        ("f-vis", {}),
        ("f-tis", {}),
        ("f-tis", {"g": 0.0, "filter": "authors-code"}),  # D = 0 on-policy, so even g = 0 filters nothing
        ("gspo", {}),
        ("gepo", {"eps_defensive": 1.0}),
    ],
)
def test_on_policy_gradient_equals_pg(name, cfg):
    inputs = on_policy()
    expected = pg_reference_grad(inputs)
    assert_close(grad("pg", inputs), expected)
    assert_close(grad(name, inputs, **cfg), expected)


def test_on_policy_token_norm_grpo_equals_token_norm_pg():
    # both −A_i / Σ|y_i| = −A_i / 13 per token
    inputs = on_policy()
    expected = -inputs.advantages[:, None] * inputs.mask / 13.0
    assert_close(grad("grpo", inputs, norm="token"), expected)
    assert_close(grad("pg", inputs, norm="token"), expected)


def test_on_policy_gepo_single_row_groups_equals_pg():
    # one row per group: E_q = q_i² / q_i = q_i = p_i, so w = 1 and its gradient is pg's
    inputs = on_policy()
    inputs.group_ids = torch.arange(4)
    assert_close(grad("gepo", inputs), pg_reference_grad(inputs))


def test_on_policy_unaligned_rows_still_give_pg_gradient():
    # rows 1 and 3 re-tokenised: log r = (Σ_t log π − log μ(y))/T_recv = 0 on each token; the
    # row mean of T_recv equal terms −r·A has gradient −A/(B·T_recv) per token, as pg
    inputs = on_policy(aligned=(True, False, True, False))
    inputs.logp_beh[1] = float("nan")  # per-token μ of an unaligned row must never be read
    expected = pg_reference_grad(inputs)
    for name in ("grpo", "vis", "tis", "f-tis", "gspo"):
        assert_close(grad(name, inputs), expected)


def test_unaligned_ratio_spreads_gradient_over_the_row():
    # row 1 unaligned with log μ(y) = Σ log π − 2 ln 1.1, so r = 1.1 on both tokens; vis, A = −0.5:
    # loss = (1/B)·(1/2)·Σ_t −min(r·A, clip(r)·A) = (1/2)(1/2)·2·0.5·r = 0.25 r,
    # ∂r/∂ log π_s = r/2 → gradient 0.25·1.1/2 = 0.1375 on both tokens, 0 on the padding
    logp = [[-1.0, -2.0, -0.5], [-0.25, -1.5, 0.0]]
    beh = [[-1.0, -2.0, -0.5], [float("nan")] * 3]
    inputs = make_inputs(
        logp, beh, [[1.0] * 3, [1.0, 1.0, 0.0]], [0.0, -0.5],
        aligned=[True, False], beh_seq=[0.0, -1.75 - 2 * math.log(1.1)],
    )  # fmt: skip
    g = grad("vis", inputs)
    assert_close(g[1], torch.tensor([0.1375, 0.1375, 0.0]))
    assert_close(g[0], torch.zeros(3))  # A = 0


def filter_inputs() -> LossInputs:
    """Four rows of two tokens; per-token x = log μ − log π:

    row 0: A=−1, x = [ln 4, ln 4]: k3 = 4 − ln 4 − 1 = 1.613706 each → D_sum 3.227411, D_mean 1.613706
    row 1: A=−1, x = [ln 2, 0]:   k3 = [0.306853, 0]        → D_sum 0.306853, D_mean 0.153426
    row 2: A=+1, x = [ln 4, ln 4]                            → D as row 0, but A > 0
    row 3: A=−1, x = [0, 0]                                  → D = 0
    """
    logp = [[-1.0, -1.5]] * 4
    x = [[math.log(4)] * 2, [math.log(2), 0.0], [math.log(4)] * 2, [0.0, 0.0]]
    beh = [[lp + xi for lp, xi in zip(row, xrow)] for row, xrow in zip(logp, x)]
    return make_inputs(logp, beh, [[1.0, 1.0]] * 4, [-1.0, -1.0, 1.0, -1.0])


D4 = 4 - math.log(4) - 1  # k3 at x = ln 4: 1.613706
D2 = 2 - math.log(2) - 1  # k3 at x = ln 2: 0.306853
P4 = 0.75 - math.log(4) / 4  # r log r − r + 1 at r = π/μ = 1/4: 0.403426
P2 = 0.5 - math.log(2) / 2  # ... at r = 1/2: 0.153426


@pytest.mark.parametrize(
    "filt, g, d_expected, filtered",
    [
        # paper, g = 0.25: Σ (r log r − r + 1) filters row 0 (0.807); row 1's 0.153 is kept; row 2 has A > 0
        ("paper", 0.25, [2 * P4, P2, 2 * P4, 0.0], [True, False, False, False]),
        ("paper", 0.1, [2 * P4, P2, 2 * P4, 0.0], [True, True, False, False]),
        ("paper", 1.0, [2 * P4, P2, 2 * P4, 0.0], [False, False, False, False]),
        # authors-code: mean k3 over the group's longest completion (2 tokens); g = 1: only row 0 (1.61)
        ("authors-code", 0.25, [D4, D2 / 2, D4, 0.0], [True, False, False, False]),
        ("authors-code", 1.0, [D4, D2 / 2, D4, 0.0], [True, False, False, False]),
    ],
)
def test_filter_zeroes_exactly_negative_far_rows(filt, g, d_expected, filtered):
    inputs = filter_inputs()
    view = behaviour_view(inputs)
    d = filter_statistic(view, inputs.group_ids, filt)
    assert_close(d, torch.tensor(d_expected))
    adv, mask = negative_advantage_filter(view.advantages, d, g, inclusive=filt == "authors-code")
    assert mask.tolist() == filtered
    assert_close(adv, torch.tensor([0.0 if f else a for f, a in zip(filtered, [-1.0, -1.0, 1.0, -1.0])]))

    out = build_loss("f-tis", g=g, filter=filt)(inputs)
    assert out.metrics["filtered_frac"] == sum(filtered) / 4
    out.loss.backward()
    g_filtered = inputs.logp.grad.clone()
    g_tis = grad("tis", inputs)
    for i, f in enumerate(filtered):
        if f:
            assert_close(g_filtered[i], torch.zeros(2))
        else:  # untouched rows keep exactly tis's gradient, which is nonzero here
            assert_close(g_filtered[i], g_tis[i])
            assert bool((g_tis[i] != 0).all())


@pytest.mark.parametrize("filt", ["paper", "authors-code"])
def test_the_filter_makes_its_tensors_on_the_inputs_device(filt):
    """A tensor the loss makes without naming a device lands on the default one (the CPU), which fails beside
    CUDA inputs. Here the default device is `meta` while the inputs are on the CPU: the same mix, on a CPU."""
    inputs = filter_inputs()
    with torch.device("meta"):
        out = build_loss("f-tis", g=1.0, filter=filt)(inputs)
    assert out.loss.device.type == "cpu" and out.metrics["filtered_frac"] == 0.25 * (filt == "authors-code")


def test_grpo_ratio_old_trains_a_preferred_peer_answer_that_ratio_behaviour_clips_away():
    """A peer's correct answer our policy already prefers (π_θ/μ = 1.6 > 1 + ε_high) gets no gradient
    when the ratio is against μ; SAPO and PubSwap treat it as on-policy (ratio against π_old = 1)."""
    logp = [[-1.0, -1.0]]
    beh = [[-1.0 - math.log(1.6)] * 2]  # μ = π_θ / 1.6 on both tokens
    g_beh = grad("grpo", make_inputs(logp, beh, [[1.0, 1.0]], [1.0], external=[True]))
    g_old = grad("grpo", make_inputs(logp, beh, [[1.0, 1.0]], [1.0], external=[True]), ratio="old")
    assert_close(g_beh, torch.zeros(1, 2))
    assert_close(g_old, torch.full((1, 2), -0.5))  # −A·R/|y| with R = 1: policy gradient, seq-mean
