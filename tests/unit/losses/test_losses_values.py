"""Hand-computed loss values and metrics for every loss on a B=2, T=3 batch.

The shared batch (`batch()`): row 0 has 3 tokens and A=1, row 1 has 2 tokens (third is padding)
and A=−0.5. Per-token ratios π_θ/μ are r = [[1.5, 1.0, 0.5], [3.0, 0.9, ·]], so
log μ = log π_θ − log r. log π_θ = [[−1, −2, −0.5], [−0.25, −1.5, ·]].
k3 per token of log μ − log π_θ = −log r is  k3(r) = 1/r + ln r − 1.
"""

import math

import pytest
import torch
from torch.testing import assert_close

from losses import LossInputs, build_loss
from losses.gepo import gepo_log_weight, group_logsumexp

R = [[1.5, 1.0, 0.5], [3.0, 0.9, 1.0]]
LOGP = [[-1.0, -2.0, -0.5], [-0.25, -1.5, 0.0]]
MASK = [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]


def make_inputs(
    logp, logp_beh, mask, adv, *, group_ids=None, aligned=None, beh_seq=None, external=None, ref=None
):
    """LossInputs from nested lists; logp gets requires_grad; logp_old = logp.detach()."""
    lp = torch.tensor(logp, dtype=torch.float32, requires_grad=True)
    B = lp.shape[0]
    return LossInputs(
        logp=lp,
        logp_old=lp.detach().clone(),
        logp_beh=torch.tensor(logp_beh, dtype=torch.float32),
        logp_beh_seq=torch.tensor(beh_seq if beh_seq is not None else [0.0] * B),
        beh_aligned=torch.tensor(aligned if aligned is not None else [True] * B),
        mask=torch.tensor(mask),
        advantages=torch.tensor(adv, dtype=torch.float32),
        group_ids=torch.tensor(group_ids if group_ids is not None else [0] * B),
        is_external=torch.tensor(external if external is not None else [False] * B),
        logp_ref=None if ref is None else torch.tensor(ref, dtype=torch.float32),
    )


def batch(adv=(1.0, -0.5), **kw) -> LossInputs:
    beh = [[lp - math.log(r) for lp, r in zip(lrow, rrow)] for lrow, rrow in zip(LOGP, R)]
    beh[1][2] = 5.0  # padding holds nonsense; it must never be read
    return make_inputs(LOGP, beh, MASK, list(adv), external=[False, True], **kw)


def k3r(r: float) -> float:
    """KL(μ‖π_θ) estimate of one token sampled by μ, r = π_θ/μ: r − 1 − log r."""
    return r - 1.0 - math.log(r)


def test_grpo_seq_value_and_metrics():
    out = build_loss("grpo")(batch())
    # row 0 (A=1):    r=1.5 → min(1.5, 1.28)=1.28 (clipped); r=1 → 1; r=0.5 → min(0.5, 0.8)=0.5
    #                 row mean −(1.28 + 1 + 0.5)/3 = −0.926667
    # row 1 (A=−0.5): r=3 → min(−1.5, −0.64)=−1.5 → +1.5; r=0.9 → +0.45; row mean 1.95/2 = 0.975
    # batch mean (−0.926667 + 0.975)/2 = 0.0241667
    assert_close(out.loss, torch.tensor((-(1.28 + 1.0 + 0.5) / 3 + (1.5 + 0.45) / 2) / 2))
    m = out.metrics
    # weights r on the 5 tokens: mean 6.9/5 = 1.38, var (2.25+1+0.25+9+0.81)/5 − 1.38² = 0.7576
    assert_close(m["is_weight_mean"], 1.38)
    assert_close(m["is_weight_var"], 13.31 / 5 - 1.38**2)
    assert_close(m["is_weight_max"], 3.0)
    assert_close(m["clip_frac"], 1 / 5)  # only r=1.5 with A>0
    assert m["filtered_frac"] == 0.0 and m["tokens"] == 5.0
    kl = [k3r(1.5), k3r(1.0), k3r(0.5), k3r(3.0), k3r(0.9)]
    assert_close(m["kl_beh"], sum(kl) / 5)
    assert_close(m["kl_beh_local"], sum(kl[:3]) / 3)
    assert_close(m["kl_beh_external"], sum(kl[3:]) / 2)
    assert_close(m["kl_old"], 0.0)


@pytest.mark.parametrize(
    "cfg, expected",
    [
        # token sum: row 0 −2.78, row 1 +1.95 → −0.83; token mean −0.83/5
        ({"norm": "token"}, -0.83 / 5),
        # Dr.GRPO: −0.83 / (B·T) = −0.83/6
        ({"norm": "dr"}, -0.83 / 6),
        # Dr.GRPO with the generation budget 4: −0.83 / (2·4)
        ({"norm": "dr", "max_len": 4}, -0.83 / 8),
    ],
)
def test_grpo_norms(cfg, expected):
    assert_close(build_loss("grpo", **cfg)(batch()).loss, torch.tensor(expected))


def test_grpo_k3_to_reference():
    ref = [[lp + math.log(2.0) for lp in row] for row in LOGP]  # π_ref/π_θ = 2 on every token
    out = build_loss("grpo", beta=0.1)(batch(ref=ref))
    # k3 = 2 − ln 2 − 1 = 0.306853 per token; every row mean is 0.306853, so seq norm adds
    # 0.1·0.306853 to the 0.0241667 of test_grpo_seq_value_and_metrics
    base = (-(1.28 + 1.0 + 0.5) / 3 + (1.5 + 0.45) / 2) / 2
    assert_close(out.loss, torch.tensor(base + 0.1 * (1.0 - math.log(2.0))))
    assert_close(out.metrics["kl_ref"], 1.0 - math.log(2.0))


def test_pg_values():
    # −log π·A: row 0 (1 + 2 + 0.5)/3 = 1.166667; row 1 0.5·(−0.25 − 1.5)/2 = −0.4375
    assert_close(build_loss("pg")(batch()).loss, torch.tensor((3.5 / 3 - 0.875 / 2) / 2))
    # token mean (3.5 − 0.875)/5 = 0.525
    out = build_loss("pg", norm="token")(batch())
    assert_close(out.loss, torch.tensor(2.625 / 5))
    assert out.metrics["is_weight_mean"] == 1.0 and out.metrics["is_weight_var"] == 0.0


def test_nois_value():
    # R = 1 in value and never clipped: ℓ = −A. row 0: −1; row 1: +0.5 → (−1 + 0.5)/2
    out = build_loss("nois")(batch())
    assert_close(out.loss, torch.tensor(-0.25))
    assert out.metrics["clip_frac"] == 0.0 and out.metrics["is_weight_max"] == 1.0


def test_vis_value():
    # grpo with ε = 0.2 both sides. row 0: −(min(1.5,1.2) + 1 + 0.5)/3 = −0.9
    # row 1: r=3 → min(−1.5, −0.6) = −1.5 → 1.5; r=0.9 → 0.45; mean 0.975. total (−0.9+0.975)/2
    out = build_loss("vis")(batch())
    assert_close(out.loss, torch.tensor((-0.9 + 0.975) / 2))
    assert_close(out.metrics["clip_frac"], 1 / 5)


def test_tis_value_and_metrics():
    # w = min(r, 2) = [1.5, 1, 0.5 | 2, 0.9]; ℓ = −w·A (R = 1)
    # row 0: −(1.5 + 1 + 0.5)/3 = −1; row 1: 0.5·(2 + 0.9)/2 = 0.725; total (−1 + 0.725)/2
    out = build_loss("tis")(batch())
    assert_close(out.loss, torch.tensor(-0.1375))
    m = out.metrics
    assert_close(m["is_weight_mean"], 5.9 / 5)  # 1.18
    assert_close(m["is_weight_var"], 8.31 / 5 - 1.18**2)  # (2.25+1+0.25+4+0.81)/5 − 1.18²
    assert_close(m["is_weight_max"], 2.0)
    assert_close(m["clip_frac"], 1 / 5)  # r = 3 truncated at C = 2


def test_tis_truncation_constant():
    # C = 4: nothing truncated; row 1: 0.5·(3 + 0.9)/2 = 0.975; total (−1 + 0.975)/2
    assert_close(build_loss("tis", C=4.0)(batch()).loss, torch.tensor(-0.0125))


@pytest.mark.parametrize(
    "name, filt, g, expected, filtered",
    [
        # paper: row 1 (A<0): D = Σ (r ln r − r + 1) at r = 3, 0.9: (3·1.098612 − 2) + (0.9·(−0.105361) + 0.1)
        #        = 1.295837 + 0.005175 = 1.301012 > 0.3 → A := 0. f-tis, f-nois: (−1 + 0)/2; f-vis: (−0.9 + 0)/2
        ("f-tis", "paper", 0.3, -0.5, 0.5),
        ("f-nois", "paper", 0.3, -0.5, 0.5),
        ("f-vis", "paper", 0.3, -0.45, 0.5),
        # authors-code: D = Σ k3(log μ − log π)/L = (0.431946 + 0.005750)/3 = 0.145899 (L = 3, the group's
        # longest completion): < 0.3 keeps the row (f-tis = tis = −0.1375); > 0.1 filters it
        ("f-tis", "authors-code", 0.3, -0.1375, 0.0),
        ("f-tis", "authors-code", 0.1, -0.5, 0.5),
    ],
)
def test_filtered_variants(name, filt, g, expected, filtered):
    out = build_loss(name, g=g, filter=filt)(batch())
    assert_close(out.loss, torch.tensor(expected))
    assert out.metrics["filtered_frac"] == filtered


def test_filter_thresholds_default_to_each_sources_own():
    from losses.config import FISConfig

    assert FISConfig(name="f-tis").threshold == 50.0
    assert FISConfig(name="f-tis", filter="authors-code").threshold == 5.0
    assert FISConfig(name="f-tis", filter="authors-code", g=7).threshold == 7.0


def test_gspo_value():
    # s_0 = (1.5·1·0.5)^(1/3) = 0.908560; A=1: min(s, clip(s, 0.9997, 1.0004)=0.9997) = s → −0.908560
    # s_1 = (3·0.9)^(1/2) = 1.643168; A=−0.5: min(−0.821584, −0.5002) → +0.821584
    out = build_loss("gspo")(batch())
    s0, s1 = 0.75 ** (1 / 3), 2.7**0.5
    assert_close(out.loss, torch.tensor((-s0 + 0.5 * s1) / 2))
    assert out.metrics["clip_frac"] == 0.0
    assert_close(out.metrics["is_weight_mean"], (s0 + s1) / 2)


def test_gspo_clipped():
    # A = [−1, 1]: row 0: min(−0.908560, −0.9997) = −0.9997 → +0.9997 (clipped)
    #              row 1: min(1.643168, 1.0004) = 1.0004 → −1.0004 (clipped)
    out = build_loss("gspo")(batch(adv=(-1.0, 1.0)))
    assert_close(out.loss, torch.tensor((0.9997 - 1.0004) / 2))
    assert out.metrics["clip_frac"] == 1.0


def gepo_batch(group_ids=(0, 0), adv=(1.0, -1.0)) -> LossInputs:
    """p = [0.4, 0.3], q = [0.5, 0.25] as geometric means of two tokens each.

    p_0 = (0.8·0.2)^½ = 0.4, q_0 = (0.25·1)^½ = 0.5, p_1 = 0.3, q_1 = (0.125·0.5)^½ = 0.25.
    """
    logp = [[math.log(0.8), math.log(0.2)], [math.log(0.3), math.log(0.3)]]
    beh = [[math.log(0.25), math.log(1.0)], [math.log(0.125), math.log(0.5)]]
    return make_inputs(logp, beh, [[1.0, 1.0], [1.0, 1.0]], list(adv), group_ids=list(group_ids))


def test_gepo_weight_is_p_over_group_expectation():
    # E_q = Σq²/Σq = (0.25 + 0.0625)/0.75 = 0.416667; w = p/E_q = [0.96, 0.72]
    seq_logp = torch.log(torch.tensor([0.4, 0.3]))
    seq_logq = torch.log(torch.tensor([0.5, 0.25]))
    include = torch.tensor([True, True])
    w = torch.exp(gepo_log_weight(seq_logp, seq_logq, torch.tensor([7, 7]), include, 0.0))
    assert_close(w, torch.tensor([0.96, 0.72]))
    # separate groups: E_q = q_i, so w = p/q = [0.8, 1.2] (standard sequence IS)
    w = torch.exp(gepo_log_weight(seq_logp, seq_logq, torch.tensor([3, 9]), include, 0.0))
    assert_close(w, torch.tensor([0.8, 1.2]))


def test_group_logsumexp_skips_excluded_rows():
    # groups {0: rows 0, 1, 3}, {5: row 2}; row 3 excluded: group 0 → log(e^0 + e^1), group 5 → −inf
    x = torch.tensor([0.0, 1.0, 2.0, 50.0])
    out = group_logsumexp(x, torch.tensor([0, 0, 5, 0]), torch.tensor([True, True, False, False]))
    lse = math.log(1.0 + math.e)
    assert_close(out, torch.tensor([lse, lse, -math.inf, lse]))


def test_gepo_loss_value():
    out = build_loss("gepo")(gepo_batch())
    # w = [0.96, 0.72]. row 0 (A=1): −min(0.96, 0.96) = −0.96
    # row 1 (A=−1): −min(−0.72, −clip(0.72, 0.8, 1.2)) = −min(−0.72, −0.8) = 0.8 (clipped)
    assert_close(out.loss, torch.tensor((-0.96 + 0.8) / 2))
    assert out.metrics["clip_frac"] == 0.5
    assert_close(out.metrics["is_weight_mean"], 0.84)
    assert_close(out.metrics["is_weight_var"], 0.12**2)
    assert_close(out.metrics["is_weight_max"], 0.96)


def test_gepo_defensive_half():
    # ε_d = 0.5: w_0 = 0.4/(0.5·0.4 + 0.5·0.416667) = 0.979592, w_1 = 0.3/(0.15 + 0.208333) = 0.837209
    # both inside [0.8, 1.2]: loss (−0.979592 + 0.837209)/2
    out = build_loss("gepo", eps_defensive=0.5)(gepo_batch())
    eq = 0.3125 / 0.75
    w0, w1 = 0.4 / (0.2 + 0.5 * eq), 0.3 / (0.15 + 0.5 * eq)
    assert_close(out.loss, torch.tensor((-w0 + w1) / 2))


def test_gepo_defensive_one_is_unit_weight():
    # ε_d = 1: w = p/sg(p) = 1 in value; loss (−1 + 1)/2 = 0
    out = build_loss("gepo", eps_defensive=1.0)(gepo_batch())
    assert_close(out.loss, torch.tensor(0.0))
    assert_close(out.metrics["is_weight_mean"], 1.0)
    assert_close(out.metrics["is_weight_var"], 0.0)


def test_gepo_two_groups_and_cppo_kl():
    out = build_loss("gepo", beta=0.1)(gepo_batch(group_ids=(0, 1)))
    # w = p/q = [0.8, 1.2]: row 0 −min(0.8, 0.8) = −0.8; row 1 −min(−1.2, −1.2) = 1.2 → 0.2
    # k3 per token with ratio q/p: row 0: k3(0.25/0.8) = 0.3125 − ln 0.3125 − 1 = 0.475651,
    #   k3(1/0.2) = 5 − ln 5 − 1 = 2.390562 → mean 1.433106
    # row 1: k3(0.125/0.3) = 0.292136, k3(0.5/0.3) = 0.155841 → mean 0.223988
    # loss 0.2 + 0.1·(1.433106 + 0.223988)/2 = 0.282855
    def k3q(ratio):
        return ratio - math.log(ratio) - 1.0

    kl0 = (k3q(0.25 / 0.8) + k3q(1.0 / 0.2)) / 2
    kl1 = (k3q(0.125 / 0.3) + k3q(0.5 / 0.3)) / 2
    assert_close(out.loss, torch.tensor(0.2 + 0.1 * (kl0 + kl1) / 2))
    assert out.metrics["clip_frac"] == 0.0


def test_k3_is_accurate_for_tiny_log_ratios_in_float32():
    """e^x − x − 1 cancels in float32 near 0; k3 must still match float64 to 1e-6 relative."""
    from losses.base import k3

    x = torch.tensor([1e-6, -1e-5, 1e-4, -3e-3, 0.0099, 0.0101, 0.7, -4.0], dtype=torch.float32)
    exact = torch.expm1(x.double()) - x.double()
    assert_close(k3(x).double(), exact, rtol=1e-6, atol=0.0)
