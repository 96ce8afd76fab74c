"""GSPO: Group Sequence Policy Optimization (Zheng et al. 2025, arXiv 2507.18071).

A sequence-level ratio, the geometric mean of the token ratios (gepo paper eq. 7):

    s_i = exp((1/|y_i|) Σ_t (log π_θ − log μ))
    L   = (1/B) Σ_i −min(s_i·A_i, clip(s_i, 1−ε_low, 1+ε_high)·A_i)

Defaults ε_low = 3e-4, ε_high = 4e-4 are the GSPO paper's: a length-normalised ratio stays
close to 1, so its clip range is orders of magnitude narrower than a token ratio's. With the
far-off-policy rollouts of heterogeneous peers most rows fall outside that range and give no
gradient; widen eps_low / eps_high (e.g. 0.2) for such swarms.

Deliberate deviations:
- The ratio is against the behaviour policy μ (one optimizer step per batch, docs/ARCHITECTURE.md §7).
- Rows from a different tokenizer use mean_t log μ := log μ(y)/T_recv (docs/ARCHITECTURE.md §6).
- A row without tokens contributes 0 (it has no ratio); the mean still divides by B.
"""

from __future__ import annotations

from losses.base import (
    LossInputs,
    LossOutputs,
    behaviour_view,
    clipped_surrogate,
    loss_metrics,
    reduce_rows,
    row_mean,
    safe_exp,
)
from losses.config import GSPOConfig


def gspo_loss(inputs: LossInputs, cfg: GSPOConfig) -> LossOutputs:
    """GSPO loss (module docstring)."""
    view = behaviour_view(inputs)
    s = safe_exp(row_mean(view.log_ratio, view))  # [B]
    per_row, clipped = clipped_surrogate(s, view.advantages, cfg.eps_low, cfg.eps_high)  # [B]
    loss = reduce_rows(per_row, view)
    return LossOutputs(loss, loss_metrics(inputs, view, s, view.row_valid, clipped))
