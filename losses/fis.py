"""The F-TIS family: nois, vis, tis and their filtered variants f-nois, f-vis, f-tis.

F-TIS: Harnessing Diverse Models in Collaborative GRPO (ICML 2026, arXiv 2605.22537), whose
TIS backbone is Yao et al. 2025 (truncated importance sampling). Per token, with
R_{i,t} = exp(log π_θ − log π_old) (the paper's π_θ/π_θ,detach: value 1 on the round's first
step, gradient ∇log π_θ; against the round's fixed π_old on later PPO steps) and
w_{i,t} = sg(min(exp(log π_θ − log μ), C)):

    nois: ℓ_{i,t} = −min(R·A_i, clip(R, 1−ε_low, 1+ε_high)·A_i)       off-policy as on-policy
    vis:  ℓ_{i,t} = −min(r·A_i, clip(r, 1−ε_low, 1+ε_high)·A_i),  r = exp(log π_θ − log μ)
    tis:  ℓ_{i,t} = −w_{i,t}·min(R·A_i, clip(R, 1−ε_low, 1+ε_high)·A_i)

    L = (1/G) Σ_i (1/|a_i|) Σ_t ℓ_{i,t}        (G = rows in the batch, |a_i| = tokens of row i)

f-* adds the negative-advantage filter (F-TIS Key Design 2): A_i := 0 when A_i < 0 and D_i > g.
The paper states D_i = D_KL(π_θ‖π_gen) with g = 50; its authors' code computes something else.
Both are offered (`filter`), r_{i,t} = π_θ/μ on the row's tokens, which μ sampled:

    paper         D_i = Σ_t (r log r − r + 1)       an unbiased estimate of Σ_t KL(π_θ‖μ) at the
                  (default, g = 50, A < 0)          prefixes μ visited (E_μ[r log r] = KL(π_θ‖μ),
                                                    E_μ[r − 1] = 0; each term ≥ 0)
    authors-code  D_i = (1/L) Σ_t k3_{i,t},  k3 = e^{log μ − log π} − (log μ − log π) − 1,
                  (g = 5, A ≤ 0)                    L = the longest completion of row i's group;
                                                    E_μ[k3] = χ²(μ‖π) − KL(μ‖π), neither KL

The default follows the paper's text: its statistic is the divergence the paper argues for, and
its threshold 50 is stated for it. The code's statistic is dominated by tokens π_θ finds very
unlikely (≈ μ/π); with it g = 5 is the authors' value. The advantages were normalised before the
loss, so a filtered row still counted in its group's mean and std, as the paper requires.
`filtered_frac` = filtered rows / B.

Deliberate deviations:
- ε_low = ε_high = 0.2 by default (the paper's ε); they are separate knobs so vis can match
  grpo's clip-higher when wanted.
- The filter's D_i is computed with stop-gradient and applies to every row; the paper's
  setting only ever filters peers' rows in practice because this node's own rows have D ≈ 0.
- The authors' code removes a filtered row from its micro-batch (re-weighting the others); here
  its advantage is zeroed and it keeps its 1/G share, as the paper's formula has it.
- For a row from a different tokenizer (docs/ARCHITECTURE.md §6) r and w are the chunk's ratio r_c
  on each of its tokens (r_c^(1/n_c) with train.cross_tokenizer: chunks-geometric; the
  length-normalised sequence ratio with `sequence`), and D_i sums one term per chunk of the
  chunk's own ratio: the same statistic as an aligned row's when the two tokenizations agree, on
  the same scale when they do not. A row under `sequence` keeps T_recv terms of the spread
  sequence ratio, which is smaller than any finer sum (the filter rarely fires on it).
- clip_frac counts tokens whose gradient the clip removes (vis) or whose w was truncated at C
  (tis); R is never clipped since its value is 1.
"""

from __future__ import annotations

import torch
from torch import Tensor

from losses.base import (
    LOG_RATIO_BOUND,
    BehaviourView,
    LossInputs,
    LossOutputs,
    behaviour_view,
    clipped_surrogate,
    k3,
    loss_metrics,
    reduce_tokens,
    safe_exp,
)
from losses.config import VARIANTS, FISConfig


def filter_statistic(view: BehaviourView, group_ids: Tensor, kind: str) -> Tensor:
    """D_i [B] of the negative-advantage filter (module docstring), no gradient."""
    # one term per unit: a token, or a chunk of a row from another tokenizer (each of its n tokens counts 1/n)
    n = view.unit_len
    log_r = view.unit_log_ratio.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)  # [B, T] log π_θ/μ of the unit
    if kind == "paper":
        r = torch.exp(log_r)
        return ((r * log_r - r + 1.0) * view.m / n).sum(dim=1)  # Σ_units (r log r − r + 1)
    per_token = k3(-log_r) * view.m / n  # [B, T] k3 of log μ − log π_θ, per unit
    _, idx = torch.unique(group_ids, return_inverse=True)
    longest = torch.zeros(int(idx.max()) + 1, dtype=view.n_tokens.dtype, device=view.n_tokens.device).scatter_reduce(
        0, idx, view.n_tokens, reduce="amax")  # the group's padded length
    return per_token.sum(dim=1) / longest[idx].clamp(min=1.0)


def negative_advantage_filter(adv: Tensor, stat: Tensor, g: float, *, inclusive: bool = False) -> tuple[Tensor, Tensor]:
    """A_i := 0 where A_i < 0 (≤ 0 when `inclusive`) and D_i > g. Returns (advantages [B], filtered [B])."""
    negative = adv <= 0 if inclusive else adv < 0
    filtered = negative & (stat > g)
    return torch.where(filtered, torch.zeros_like(adv), adv), filtered


def fis_loss(inputs: LossInputs, cfg: FISConfig) -> LossOutputs:
    """The family member named by cfg.name (module docstring)."""
    variant = VARIANTS[cfg.name]
    view = behaviour_view(inputs)
    adv, filtered = view.advantages, None
    if variant.filtered:
        stat = filter_statistic(view, inputs.group_ids, cfg.filter)
        adv, filtered = negative_advantage_filter(adv, stat, cfg.threshold, inclusive=cfg.filter == "authors-code")
    r_beh = safe_exp(view.log_ratio)  # [B, T] π_θ/μ (grad)
    if variant.ratio == "behaviour":
        ratio = r_beh
    else:
        ratio = safe_exp(view.log_ratio_old)  # [B, T] R = π_θ/π_old: value 1 on the round's first step
    per_token, clipped = clipped_surrogate(ratio, adv[:, None], cfg.eps_low, cfg.eps_high)
    weight = ratio.detach()
    if variant.truncate:
        weight = r_beh.detach().clamp(max=cfg.C)  # [B, T] w, no grad
        per_token = weight * per_token
        clipped = clipped | (r_beh.detach() > cfg.C)
    loss = reduce_tokens(per_token, view, "seq")
    return LossOutputs(loss, loss_metrics(inputs, view, weight, view.valid, clipped, filtered))
