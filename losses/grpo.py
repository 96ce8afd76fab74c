"""GRPO with DAPO clip-higher and Dr.GRPO normalisation, and plain policy gradient (DASH).

grpo (Shao et al. 2024, DeepSeekMath; clip-higher from DAPO, Yu et al. 2025):

    r_{i,t} = exp(log π_θ − log μ)          (ratio: behaviour — the default; HeteroRL's GRPO baseline)
    r_{i,t} = exp(log π_θ − log π_old)      (ratio: old — SAPO's and PubSwap's GRPO: every row, a
                                             peer's included, is treated as on-policy; r = 1 on
                                             the round's first step, clipped on later PPO steps)
    ℓ_{i,t} = −min(r_{i,t}·A_i, clip(r_{i,t}, 1−ε_low, 1+ε_high)·A_i) + β·k3_{i,t}
    ℓ_{i,t} = min(ℓ_{i,t}, −c·A_i)   where A_i < 0                      (dual clip, c = dual_clip = 3)
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
- Dual clip (Ye et al. 2020, "Mastering Complex Control in MOBA Games with Deep Reinforcement
  Learning", c = 3), on by default: the hostile-input bound. GRPO as stated has no bound on PPO's
  unclipped side — for A < 0 a token's loss is r·|A| with gradient weight r, however large r is.
  Against π_old that side is harmless (r = 1 on the first step). Against μ it is not: μ is a
  peer's *claim*, so a peer choosing log μ = log π_θ − 19 on its tokens would have each of them
  weighted e^19 ≈ 1.8e8 in our gradient (LOG_RATIO_BOUND only stops the gradient past e^20), and a
  claim of −30 per token made a node log a loss of 4.39e7. With the dual clip, where A < 0 the
  loss is capped at c·|A|: a token's gradient weight is at most c and none beyond r > c, so
  neither the gradient nor the logged loss is a peer's to choose. GRPO's gradient is unchanged
  wherever r ≤ c (own rows on their first step: r = 1). `dual_clip: null` restores GRPO's
  unbounded side.
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
    per_token, clipped = clipped_surrogate(ratio, view.advantages[:, None], cfg.eps_low, cfg.eps_high, cfg.dual_clip)
    extra: dict[str, float] = {}
    if cfg.beta > 0:
        ref = torch.where(view.valid, inputs.logp_ref.detach().to(torch.float32), 0.0)  # [B, T]
        kl_ref = k3(ref - view.logp)  # [B, T], grad through log π_θ
        per_token = per_token + cfg.beta * kl_ref
        extra["kl_ref"] = masked_stats(kl_ref, view.valid)[0]
    loss = reduce_tokens(per_token, view, cfg.norm, cfg.max_len)
    cap = None if cfg.dual_clip is None else max(cfg.dual_clip, 1.0 + cfg.eps_high)  # the largest weight it applies
    metrics = loss_metrics(inputs, view, ratio, view.valid, clipped, cap=cap)
    return LossOutputs(loss, {**metrics, **extra})


def pg_loss(inputs: LossInputs, cfg: PGConfig) -> LossOutputs:
    """Policy-gradient loss −log π_θ·A with the configured normalisation."""
    view = behaviour_view(inputs)
    per_token = -view.logp * view.advantages[:, None]  # [B, T]
    loss = reduce_tokens(per_token, view, cfg.norm, cfg.max_len)
    ones = torch.ones_like(view.m)
    metrics = loss_metrics(inputs, view, ones, view.valid, torch.zeros_like(view.valid))
    return LossOutputs(loss, metrics)
