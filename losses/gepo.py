"""GEPO: Group Expectation Policy Optimization (Zhang et al., HeteroRL; gepo paper eq. 9–15).

Per sequence, length-normalised probabilities (eq. 9)

    p_i = exp((1/|y_i|) Σ_t log π_θ),   q_i = exp((1/|y_i|) Σ_t log μ),

and, within each group k of rows answering the same prompt (`group_ids`), the group
expectation of q under the group-normalised q̂ (eq. 11, stop-gradient):

    q̂_i = q_i / Σ_{j∈k} q_j,    E_q = Σ_{j∈k} q̂_j·q_j = Σ_{j∈k} q_j² / Σ_{j∈k} q_j.

Importance weight (eq. 12) and its defensive form (eq. 15, ε_d ∈ [0, 1]; ε_d = 0 is eq. 12):

    w_i = p_i / (ε_d·sg(p_i) + (1 − ε_d)·E_q)
    L   = (1/B) Σ_i −min(w_i·A_i, clip(w_i, 1−ε_low, 1+ε_high)·A_i)
          + β·(1/B) Σ_i (1/|y_i|) Σ_t k3_{i,t}        (CPPO-KL, Zhang et al. 2024; paper β = 0.005)

with k3_{i,t} = e^{log μ − log π_θ} − (log μ − log π_θ) − 1. At ε_d = 1, w = 1 in value and its
gradient is that of log p_i·A_i (the paper's remark: the objective becomes policy gradient).

Numerics: everything is computed in log space. log E_q = LSE_k(2 log q) − LSE_k(log q) with a
per-group max subtracted inside each log-sum-exp; the defensive denominator is a logaddexp;
log w is clamped to ±20 before exp (losses.base).

Deliberate deviations:
- The paper's listing sums over the whole per-device batch; here the sums run over each
  prompt group (`group_ids`), as its eq. 11 defines, so a micro-batch must hold whole groups.
- ε_d is a fixed knob (the paper sets it ∝ Var(q) by an unspecified heuristic).
- β defaults to 0 (the paper uses 0 online and 0.005 under delay).
- Rows from a different tokenizer use mean_t log μ := log μ(y)/T_recv (docs/ARCHITECTURE.md §6). Rows
  without tokens are left out of their group's sums and contribute 0.
"""

from __future__ import annotations

import torch
from torch import Tensor

from losses.base import (
    LossInputs,
    LossOutputs,
    behaviour_view,
    clipped_surrogate,
    k3,
    log_or_neg_inf,
    loss_metrics,
    reduce_rows,
    row_mean,
    safe_exp,
)
from losses.config import GEPOConfig


def group_logsumexp(x: Tensor, group_ids: Tensor, include: Tensor) -> Tensor:
    """[B] → [B]: log Σ_{j in i's group, include_j} exp(x_j) for every row i (no grad).

    The per-group max is subtracted before exp; a group with no included row gives −inf.
    """
    x = x.detach()
    _, idx = torch.unique(group_ids, return_inverse=True)  # [B] contiguous group index
    n_groups = int(idx.max()) + 1
    xm = torch.where(include, x, torch.full_like(x, -torch.inf))
    gmax = torch.full((n_groups,), -torch.inf, dtype=x.dtype, device=x.device)
    gmax = gmax.scatter_reduce(0, idx, xm, reduce="amax")
    gmax = torch.where(torch.isfinite(gmax), gmax, torch.zeros_like(gmax))
    sums = torch.zeros_like(gmax).index_add(0, idx, torch.exp(xm - gmax[idx]))
    return (torch.log(sums) + gmax)[idx]


def gepo_log_weight(
    seq_logp: Tensor,  # [B] log p_i = mean_t log π_θ (grad)
    seq_logq: Tensor,  # [B] log q_i = mean_t log μ
    group_ids: Tensor,  # [B]
    include: Tensor,  # [B] bool, rows that enter their group's sums
    eps_d: float,
) -> Tensor:
    """log w_i [B] of eq. 15 (grad through seq_logp only); 0 for rows not included."""
    log_sum_q2 = group_logsumexp(2.0 * seq_logq, group_ids, include)  # log Σ_j q_j²
    log_eq = log_sum_q2 - group_logsumexp(seq_logq, group_ids, include)  # log E_q
    log_den = torch.logaddexp(
        log_or_neg_inf(eps_d) + seq_logp.detach(), log_or_neg_inf(1.0 - eps_d) + log_eq
    )  # [B]
    return torch.where(include, seq_logp - log_den, torch.zeros_like(seq_logp))


def gepo_loss(inputs: LossInputs, cfg: GEPOConfig) -> LossOutputs:
    """GEPO loss (module docstring)."""
    view = behaviour_view(inputs)
    log_w = gepo_log_weight(view.seq_logp, view.seq_logq, inputs.group_ids, view.row_valid, cfg.eps_defensive)
    w = safe_exp(log_w)  # [B]
    per_row, clipped = clipped_surrogate(w, view.advantages, cfg.eps_low, cfg.eps_high)  # [B]
    loss = reduce_rows(per_row, view)
    if cfg.beta > 0:
        kl = row_mean(k3(-view.log_ratio), view)  # [B] (1/|y_i|) Σ_t k3, grad through log π_θ
        loss = loss + cfg.beta * kl.sum() / view.totals.rows
    return LossOutputs(loss, loss_metrics(inputs, view, w, view.row_valid, clipped))
