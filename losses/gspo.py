"""GSPO: Group Sequence Policy Optimization (Zheng et al. 2025, arXiv 2507.18071).

A sequence-level ratio, the geometric mean of the token ratios (gepo paper eq. 7):

    s_i = exp((1/|y_i|) Σ_t (log π_θ − log μ))
    L   = (1/B) Σ_i −min(s_i·A_i, clip(s_i, 1−ε_low, 1+ε_high)·A_i)

Defaults ε_low = 3e-4, ε_high = 4e-4 are the GSPO paper's: a length-normalised ratio stays
close to 1, so its clip range is orders of magnitude narrower than a token ratio's. With the
far-off-policy rollouts of heterogeneous peers most rows fall outside that range and give no
gradient; widen eps_low / eps_high (e.g. 0.2) for such swarms.

Deliberate deviations:
- The ratio is against the behaviour policy μ (one optimizer step per batch, DESIGN §9).
- Rows from a different tokenizer use mean_t log μ := log μ(y)/T_recv (DESIGN §7).
- A row without tokens contributes 0 (it has no ratio); the mean still divides by B.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from losses.base import (
    LossInputs,
    LossOutputs,
    behaviour_view,
    clipped_surrogate,
    loss_metrics,
    row_mean,
    safe_exp,
)


class GSPOConfig(BaseModel):
    """GSPO: sequence-level clipped ratio (length-normalised)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Literal["gspo"] = Field("gspo", description="Loss name.")
    eps_low: float = Field(3e-4, ge=0.0, le=1.0, description="Lower clip: s ≥ 1 − eps_low (GSPO: 3e-4).")
    eps_high: float = Field(4e-4, ge=0.0, le=10.0, description="Upper clip: s ≤ 1 + eps_high (GSPO: 4e-4).")


def gspo_loss(inputs: LossInputs, cfg: GSPOConfig) -> LossOutputs:
    """GSPO loss (module docstring)."""
    view = behaviour_view(inputs)
    s = safe_exp(row_mean(view.log_ratio, view))  # [B]
    per_row, clipped = clipped_surrogate(s, view.advantages, cfg.eps_low, cfg.eps_high)  # [B]
    B = per_row.shape[0]
    loss = (per_row * view.row_valid).sum() / B
    return LossOutputs(loss, loss_metrics(inputs, view, s, view.row_valid, clipped))
