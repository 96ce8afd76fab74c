"""The F-TIS family: nois, vis, tis and their filtered variants f-nois, f-vis, f-tis.

F-TIS: Harnessing Diverse Models in Collaborative GRPO (ICML 2026, arXiv 2605.22537), whose
TIS backbone is Yao et al. 2025 (truncated importance sampling). Per token, with
R_{i,t} = exp(log π_θ − sg(log π_θ)) (value 1, gradient ∇log π_θ) and
w_{i,t} = sg(min(exp(log π_θ − log μ), C)):

    nois: ℓ_{i,t} = −min(R·A_i, clip(R, 1−ε_low, 1+ε_high)·A_i)       off-policy as on-policy
    vis:  ℓ_{i,t} = −min(r·A_i, clip(r, 1−ε_low, 1+ε_high)·A_i),  r = exp(log π_θ − log μ)
    tis:  ℓ_{i,t} = −w_{i,t}·min(R·A_i, clip(R, 1−ε_low, 1+ε_high)·A_i)

    L = (1/G) Σ_i (1/|a_i|) Σ_t ℓ_{i,t}        (G = rows in the batch, |a_i| = tokens of row i)

f-* adds the negative-advantage filter (F-TIS Key Design 2): A_i := 0 when A_i < 0 and D_i > g,

    D_i = reduce_t k3_{i,t},   k3_{i,t} = e^{log μ − log π_θ} − (log μ − log π_θ) − 1,

reduce = sum (paper: per-sequence estimate, g = 50) or mean (the co-authors' code: g = 5).
The advantages were normalised before the loss, so a filtered row still counted in its
group's mean and std, as the paper requires. `filtered_frac` = filtered rows / B.

Deliberate deviations:
- ε_low = ε_high = 0.2 by default (the paper's ε); they are separate knobs so vis can match
  grpo's clip-higher when wanted.
- The filter's D_i is computed with stop-gradient and applies to every row; the paper's
  setting only ever filters peers' rows in practice because this node's own rows have D ≈ 0.
- For a row from a different tokenizer (docs/ARCHITECTURE.md §6) r, w and k3 use the length-normalised
  sequence ratio on every token, so D_i(sum) = T_recv·k3 of that ratio.
- clip_frac counts tokens whose gradient the clip removes (vis) or whose w was truncated at C
  (tis); R is never clipped since its value is 1.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from losses.base import (
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


def sequence_kl(view: BehaviourView, reduction: Literal["sum", "mean"]) -> Tensor:
    """D_i [B]: per-token k3 of (log μ − log π_θ), summed or averaged over the row (no grad)."""
    per_token = k3(-view.log_ratio.detach()) * view.m  # [B, T]
    total = per_token.sum(dim=1)
    return total if reduction == "sum" else total / view.n_tokens.clamp(min=1.0)


def negative_advantage_filter(adv: Tensor, kl: Tensor, g: float) -> tuple[Tensor, Tensor]:
    """A_i := 0 where A_i < 0 and D_i > g. Returns (filtered advantages [B], filtered rows [B])."""
    filtered = (adv < 0) & (kl > g)
    return torch.where(filtered, torch.zeros_like(adv), adv), filtered


def fis_loss(inputs: LossInputs, cfg: FISConfig) -> LossOutputs:
    """The family member named by cfg.name (module docstring)."""
    variant = VARIANTS[cfg.name]
    view = behaviour_view(inputs)
    adv, filtered = view.advantages, None
    if variant.filtered:
        adv, filtered = negative_advantage_filter(adv, sequence_kl(view, cfg.reduction), cfg.g)
    r_beh = safe_exp(view.log_ratio)  # [B, T] π_θ/μ (grad)
    if variant.ratio == "behaviour":
        ratio = r_beh
    else:
        ratio = torch.exp(view.logp - view.logp.detach())  # [B, T] R: value 1
    per_token, clipped = clipped_surrogate(ratio, adv[:, None], cfg.eps_low, cfg.eps_high)
    weight = ratio.detach()
    if variant.truncate:
        weight = r_beh.detach().clamp(max=cfg.C)  # [B, T] w, no grad
        per_token = weight * per_token
        clipped = clipped | (r_beh.detach() > cfg.C)
    loss = reduce_tokens(per_token, view, "seq")
    return LossOutputs(loss, loss_metrics(inputs, view, weight, view.valid, clipped, filtered))
