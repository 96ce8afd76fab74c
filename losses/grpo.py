"""GRPO with DAPO clip-higher and Dr.GRPO normalisation, and plain policy gradient (DASH).

grpo (Shao et al. 2024, DeepSeekMath; clip-higher from DAPO, Yu et al. 2025):

    r_{i,t} = exp(log π_θ − log μ)          (ratio: behaviour — the default; HeteroRL's GRPO baseline)
    r_{i,t} = exp(log π_θ − log π_old)      (ratio: old — SAPO's and PubSwap's GRPO: every row, a
                                             peer's included, is treated as on-policy; r = 1 on
                                             the round's first step, clipped on later PPO steps)
    ℓ_{i,t} = −min(r_{i,t}·A_i, clip(r_{i,t}, 1−ε_low, 1+ε_high)·A_i) + β·k3_{i,t}
    k3_{i,t} = e^{log π_ref − log π_θ} − (log π_ref − log π_θ) − 1           (optional, β > 0)

  reduced by `norm`: seq = (1/B) Σ_i (1/|y_i|) Σ_t ℓ (the GRPO paper), token = token mean over
  the batch (DAPO), dr = Σ ℓ / (B·max_len) (Dr.GRPO, Liu et al. 2025; max_len = T unless set).

pg (DASH, dash paper §3.2): ℓ_{i,t} = −log π_θ(y_t)·A_i. With one optimizer step per sampled
  batch PPO's ratio is 1 in value and its gradient is exactly this one (dash paper, "when
  θ = θ_old this gradient update is equivalent to the PG update").

Deliberate deviations:
- `ratio: behaviour` takes the ratio against the behaviour policy μ (the sampler's logprobs):
  a peer's correct answer that π_θ already prefers (π_θ/μ > 1 + ε_high) gets no gradient. SAPO
  and PubSwap train on shared rollouts as on-policy: use `ratio: old` to reproduce them.
- Rows from a different tokenizer carry their chunk's ratio on each of the chunk's tokens (the
  whole-completion ratio without the sender's token_bytes; docs/ARCHITECTURE.md §6, losses.base).
- pg's IS weight is 1 on every token (it applies none); its metrics report that, and `kl_beh`
  still shows how far μ is from π_θ.
"""

from __future__ import annotations

import torch

from losses.base import (
    LossInputs,
    LossOutputs,
    behaviour_view,
    clipped_surrogate,
    k3,
    loss_metrics,
    masked_stats,
    reduce_tokens,
    safe_exp,
)
from losses.config import GRPOConfig, PGConfig


def grpo_loss(inputs: LossInputs, cfg: GRPOConfig) -> LossOutputs:
    """GRPO loss (module docstring); raises ValueError when beta > 0 and logp_ref is missing."""
    if cfg.beta > 0 and inputs.logp_ref is None:
        raise ValueError("grpo: beta > 0 needs LossInputs.logp_ref (reference-model logprobs)")
    view = behaviour_view(inputs)
    ratio = safe_exp(view.log_ratio if cfg.ratio == "behaviour" else view.log_ratio_old)  # [B, T]
    per_token, clipped = clipped_surrogate(ratio, view.advantages[:, None], cfg.eps_low, cfg.eps_high)
    extra: dict[str, float] = {}
    if cfg.beta > 0:
        ref = torch.where(view.valid, inputs.logp_ref.detach().to(torch.float32), 0.0)  # [B, T]
        kl_ref = k3(ref - view.logp)  # [B, T], grad through log π_θ
        per_token = per_token + cfg.beta * kl_ref
        extra["kl_ref"] = masked_stats(kl_ref, view.valid)[0]
    loss = reduce_tokens(per_token, view, cfg.norm, cfg.max_len)
    metrics = loss_metrics(inputs, view, ratio, view.valid, clipped)
    return LossOutputs(loss, {**metrics, **extra})


def pg_loss(inputs: LossInputs, cfg: PGConfig) -> LossOutputs:
    """Policy-gradient loss −log π_θ·A with the configured normalisation."""
    view = behaviour_view(inputs)
    per_token = -view.logp * view.advantages[:, None]  # [B, T]
    loss = reduce_tokens(per_token, view, cfg.norm, cfg.max_len)
    ones = torch.ones_like(view.m)
    metrics = loss_metrics(inputs, view, ones, view.valid, torch.zeros_like(view.valid))
    return LossOutputs(loss, metrics)
