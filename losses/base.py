"""Shared pieces of every loss: inputs/outputs, the behaviour view, reductions, k3, metrics.

Notation (docs/ARCHITECTURE.md §7): sequence i of a batch of B rows, completion token t with mask m_{i,t};
log π_θ = `logp` (grad), log μ = `logp_beh` (the policy that sampled the tokens: this node's own
generator or a peer's), A_i = advantage, sg = stop-gradient, |y_i| = Σ_t m_{i,t}.

Tokenizer-agnostic importance weighting (docs/ARCHITECTURE.md §6, ours; no paper covers it). A row whose
sender used another tokenizer (`beh_aligned` False) was re-tokenised by this node, so its
per-token μ_t does not exist. What survives is μ summed over *chunks*: pieces of the text that
both tokenizations end at (`beh_chunks`: chunk c of each of our tokens; `logp_beh_chunks`[c] =
log μ(chunk c), node/round/align.py), or, without the sender's token_bytes, over one chunk, the
whole completion (log μ(y) = `logp_beh_seq`). With n_c our tokens in chunk c,

    log r_c = Σ_{t' ∈ c} log π_θ(y_t') − log μ(chunk c)
    token-level losses:    log r_{i,t} := log π_θ(y_t) + sg(log r_c − log π_θ(y_t))   for t in c
    sequence-level losses: mean_t log μ_t := log μ(y) / T_recv          (T_recv = |y_i|, ours)

so every token of a chunk carries the chunk's whole ratio r_c as its value, with the gradient of
its own log-probability: Σ_{t ∈ c} r_c ∇log π_θ(y_t) = r_c ∇log π_θ(c), the importance-weighted
gradient of the chunk — unbiased under μ, the per-decision analogue of token TIS (a truncation
w ≤ C acts on r_c). This is the per-token ratio when the two tokenizations agree. With
`chunk_spread` (train.cross_tokenizer: chunks-geometric) a token gets r_c^(1/n_c) instead, the
geometric mean spread over the chunk (gradient into every token of it): lower variance, but biased
towards 1 by the tokenizers' granularity (r_c = 0.01 over 2 tokens becomes 0.1 per token); with one
chunk it is the length-normalised sequence ratio GSPO and GEPO use. `unit_log_ratio` is log r of
the token's unit (a token, or its chunk) and `unit_len` = n_c: the F-TIS filter sums one term per
chunk. `behaviour_view` is the single place that builds these quantities; every loss reads μ only
through it.

Numerics. Every log-ratio is clamped to [−LOG_RATIO_BOUND, LOG_RATIO_BOUND] = [−20, 20] before
it is exponentiated (IS weights and k3): e^20 ≈ 4.9e8, so a weight, its square (variance
metric) and sums over millions of tokens stay finite in float32. Beyond the bound the factor
carries no gradient (torch.clamp), like a clipped token; a k3 value for a log-ratio below −20
is understated (e^−20 + 19 instead of |x| − 1). Inputs are upcast to float32. Positions off
the mask are set to 0 *before* any exp, so padding (whatever it holds) yields neither NaN
values nor NaN gradients; a row with no tokens contributes 0 to every loss.

`logp_old` is π_old, the policy at the start of the round's steps (docs/ARCHITECTURE.md §2):
on the round's first step it equals sg(π_θ), on later PPO steps (train.epochs, mini_batches) it
stays fixed. Losses whose trust-region ratio is against the learner itself (the F-TIS family's
R, grpo with `ratio: old`) read it through `log_ratio_old`.

Metrics: `kl_beh` estimates KL(μ‖π_θ) per token from μ's samples, k3(log π_θ − log μ) =
r − 1 − log r with r = π_θ/μ (unbiased: E_μ[r] = 1); `kl_beh_local` / `kl_beh_external` split
it by the rows' origin; `kl_old` is k3(log π_old − log π_θ), how far the steps moved π_θ.
`is_weight_*` describe the weights as the loss can use them (capped where the loss caps them:
grpo's dual clip), so a peer's claimed μ cannot set them off; `is_weight_extreme` counts the tokens
whose π_θ/μ exceeds EXTREME_WEIGHT (= 10) before any clip — an alert that is not the headline —
and the `kl_beh*` estimates leave those tokens out (one claimed μ of −30 would set them at ~e^20).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

LOG_RATIO_BOUND = 20.0
NOT_NEGLIGIBLE = 0.1  # an IS weight below this gives a peer's token (or row) < 1/10 of an own one's gradient
EXTREME_WEIGHT = 10.0  # π_θ/μ above this on a token is counted (is_weight_extreme), whatever the loss makes of it

Norm = Literal["seq", "token", "dr"]


@dataclass(frozen=True)
class BatchTotals:
    """Sizes of the whole optimizer step's batch, for a loss that sees one micro-batch of it.

    Every loss divides by counts of the *whole* step (rows, tokens, rows × length), so the
    micro-batch losses of one step add up exactly to the full-batch loss whatever the split.
    """

    rows: int  # B: completions in the step
    tokens: int  # Σ_i |y_i| over the step
    max_len: int  # longest completion of the step (Dr.GRPO's length when its max_len is unset)


@dataclass
class LossInputs:
    """One (micro-)batch of B completions padded to T tokens."""

    logp: Tensor  # [B, T] log π_θ of each completion token under this node's policy (grad)
    logp_old: Tensor  # [B, T] log π_θ_old at the start of the step (no grad)
    logp_beh: Tensor  # [B, T] log μ_t of the sampling policy; meaningful only where beh_aligned
    logp_beh_seq: Tensor  # [B] Σ_t log μ_t in the sender's own tokenization
    beh_aligned: Tensor  # [B] bool: False when the sender's tokenizer differs (docs/ARCHITECTURE.md §6)
    mask: Tensor  # [B, T] float or bool; nonzero on completion tokens
    advantages: Tensor  # [B] A_i, computed locally within each prompt group
    group_ids: Tensor  # [B] long: rows with equal id answer the same prompt (one GRPO group)
    is_external: Tensor  # [B] bool: True for rollouts gathered from peers
    logp_ref: Tensor | None = None  # [B, T] reference-model log-probs (grpo's optional k3 KL)
    totals: BatchTotals | None = None  # the whole step's sizes; None: this batch is the whole step
    beh_chunks: Tensor | None = None  # [B, T] long: chunk of each token on unaligned rows with an alignment, else −1
    logp_beh_chunks: Tensor | None = None  # [B, T] log μ of chunk k at index k (rows with beh_chunks ≥ 0)
    chunk_spread: bool = False  # chunk rows: r_c^(1/n_c) per token (geometric spread) instead of r_c (module docstring)
    imitable: Tensor | None = None  # [B] bool: rows train.imitate may push up (losses/imitation.py); None: all
    logp_teacher: Tensor | None = None  # [B, T] a teacher's log π_T of each token (losses/distill.py); None: no teacher
    teacher_scored: Tensor | None = None  # [B, T] bool: tokens logp_teacher holds a score for
    teacher_chunk: Tensor | None = None  # [B, T] long: the teacher's chunk of each token (None: one token per chunk)
    teacher_kind: Tensor | None = None  # [B, T] long: text 0, final EOS 1, off-split 2 (losses/distill.py); None: all text


@dataclass
class LossOutputs:
    loss: Tensor  # scalar, differentiable w.r.t. LossInputs.logp
    metrics: dict[str, float] = field(default_factory=dict)
    # how a metric the round record does not declare combines over a step's micro-batches: "rows" (the default),
    # "peer rows", "own rows", "sum" or "max" (node.round.record.Over; a declared metric keeps its declaration)
    combine: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BehaviourView:
    """Float32 tensors every loss reads; μ enters only through `log_ratio` and `seq_logq`."""

    valid: Tensor  # [B, T] bool, completion tokens
    m: Tensor  # [B, T] float32 mask
    n_tokens: Tensor  # [B] |y_i| (0.0 for an empty row)
    row_valid: Tensor  # [B] bool, rows with at least one token
    logp: Tensor  # [B, T] log π_θ (grad), 0 off the mask
    log_ratio: Tensor  # [B, T] log π_θ − log μ per token (grad), 0 off the mask; §6 for unaligned
    log_ratio_old: Tensor  # [B, T] log π_θ − log π_old per token (grad), 0 off the mask (our tokenization)
    seq_logp: Tensor  # [B] mean_t log π_θ (grad)
    seq_logq: Tensor  # [B] mean_t log μ (no grad); log μ(y) / T_recv for unaligned rows
    unit_len: Tensor  # [B, T] tokens sharing this token's log_ratio unit: n_c in a chunk, else 1
    unit_log_ratio: Tensor  # [B, T] log π_θ/μ of this token's unit (no grad): log r_c in a chunk, else log_ratio
    advantages: Tensor  # [B] float32
    totals: BatchTotals  # the step's sizes every reduction divides by


def validate_inputs(inputs: LossInputs) -> None:
    """Raise ValueError naming the field for a wrong shape, dtype or non-finite value that is read."""
    if not isinstance(inputs.logp, Tensor) or inputs.logp.dim() != 2:
        raise ValueError("LossInputs.logp must be a [B, T] tensor")
    B, T = inputs.logp.shape
    if B == 0 or T == 0:
        raise ValueError(f"LossInputs is empty: logp has shape {tuple(inputs.logp.shape)}")
    per_token = {"logp_old": inputs.logp_old, "logp_beh": inputs.logp_beh, "mask": inputs.mask}
    if inputs.logp_ref is not None:
        per_token["logp_ref"] = inputs.logp_ref
    per_row = {
        "logp_beh_seq": inputs.logp_beh_seq,
        "beh_aligned": inputs.beh_aligned,
        "advantages": inputs.advantages,
        "group_ids": inputs.group_ids,
        "is_external": inputs.is_external,
    }
    for name, t in per_token.items():
        if not isinstance(t, Tensor) or tuple(t.shape) != (B, T):
            raise ValueError(f"LossInputs.{name} must have shape {(B, T)}, got {_shape(t)}")
    for name, t in per_row.items():
        if not isinstance(t, Tensor) or tuple(t.shape) != (B,):
            raise ValueError(f"LossInputs.{name} must have shape {(B,)}, got {_shape(t)}")
    for name in ("beh_aligned", "is_external"):
        if per_row[name].dtype != torch.bool:
            raise ValueError(f"LossInputs.{name} must be a bool tensor, got {per_row[name].dtype}")
    if inputs.group_ids.dtype.is_floating_point or inputs.group_ids.dtype == torch.bool:
        raise ValueError(f"LossInputs.group_ids must be an integer tensor, got {inputs.group_ids.dtype}")
    valid = inputs.mask != 0
    aligned_tokens = valid & inputs.beh_aligned[:, None]
    read = {
        "logp": (inputs.logp, valid),
        "logp_old": (inputs.logp_old, valid),
        "logp_beh": (inputs.logp_beh, aligned_tokens),
        "logp_beh_seq": (inputs.logp_beh_seq, ~inputs.beh_aligned),
        "advantages": (inputs.advantages, torch.ones_like(inputs.beh_aligned)),
    }
    if inputs.logp_ref is not None:
        read["logp_ref"] = (inputs.logp_ref, valid)
    if inputs.beh_chunks is not None:
        chunks, chunk_logp = inputs.beh_chunks, inputs.logp_beh_chunks
        for name, t in (("beh_chunks", chunks), ("logp_beh_chunks", chunk_logp)):
            if not isinstance(t, Tensor) or tuple(t.shape) != (B, T):
                raise ValueError(f"LossInputs.{name} must have shape {(B, T)}, got {_shape(t)}")
        if chunks.dtype.is_floating_point or chunks.dtype == torch.bool:
            raise ValueError(f"LossInputs.beh_chunks must be an integer tensor, got {chunks.dtype}")
        chunked = valid & (chunks[:, :1] >= 0) & ~inputs.beh_aligned[:, None]
        if bool(((chunks < 0) | (chunks >= T))[chunked].any()):
            raise ValueError(f"LossInputs.beh_chunks must lie in [0, {T}) on the tokens of a row with chunks")
        read["logp_beh_chunks"] = (chunk_logp, ((chunks[:, :1] >= 0) & ~inputs.beh_aligned[:, None]).expand(B, T))
    for name, (t, where) in read.items():
        if not bool(torch.isfinite(t.detach()[where]).all()):
            raise ValueError(f"LossInputs.{name} holds NaN or inf on positions the loss reads")


def _shape(t: object) -> object:
    return tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__


def behaviour_view(inputs: LossInputs) -> BehaviourView:
    """Validate the inputs and build the per-token and per-sequence behaviour log-ratios (§7)."""
    validate_inputs(inputs)
    valid = inputs.mask != 0  # [B, T]
    m = valid.to(torch.float32)
    n_tokens = m.sum(dim=1)  # [B]
    n_safe = n_tokens.clamp(min=1.0)
    zero = torch.zeros((), dtype=torch.float32, device=m.device)
    logp = torch.where(valid, inputs.logp.to(torch.float32), zero)  # [B, T]
    aligned = inputs.beh_aligned  # [B]
    beh_where = valid & aligned[:, None]  # μ_t is never read on an unaligned row
    beh = torch.where(beh_where, inputs.logp_beh.detach().to(torch.float32), zero)  # [B, T]
    seq_logp = logp.sum(dim=1) / n_safe  # [B]
    beh_seq = torch.where(aligned, zero, inputs.logp_beh_seq.detach().to(torch.float32))  # [B]
    seq_logq = torch.where(aligned, beh.sum(dim=1) / n_safe, beh_seq / n_safe)  # [B]
    old = torch.where(valid, inputs.logp_old.detach().to(torch.float32), zero)  # [B, T]
    seq_ratio = (seq_logp - seq_logq)[:, None].expand_as(logp)  # [B, T]
    log_ratio = torch.where(aligned[:, None], logp - beh, seq_ratio)
    unit_len = torch.ones_like(m)
    if inputs.beh_chunks is not None:
        chunked_row = ~aligned & (inputs.beh_chunks[:, 0] >= 0)  # [B]
        idx = torch.where(valid & chunked_row[:, None], inputs.beh_chunks, 0).long()  # [B, T]
        chunk_logp = torch.zeros_like(logp).scatter_add(1, idx, logp)  # [B, T] Σ_{t ∈ c} log π_θ (grad)
        chunk_n = torch.zeros_like(m).scatter_add(1, idx, m)  # [B, T] n_c
        chunk_mu = torch.where(chunked_row[:, None], inputs.logp_beh_chunks.detach().to(torch.float32), zero)
        log_rc = (chunk_logp - chunk_mu).gather(1, idx)  # [B, T] log r_c of each token's chunk
        n_c = chunk_n.gather(1, idx)  # [B, T]
        if inputs.chunk_spread:  # geometric spread: r_c^(1/n_c), gradient into every token of the chunk
            per_token = log_rc / n_c.clamp(min=1.0)
        else:  # value log r_c, gradient of this token's own log π_θ only
            per_token = logp + (log_rc - logp).detach()
        log_ratio = torch.where(chunked_row[:, None], per_token, log_ratio)
        unit_len = torch.where(chunked_row[:, None] & valid, n_c, unit_len)
        unit_log_ratio = torch.where(chunked_row[:, None], log_rc.detach(), log_ratio.detach())
    else:
        unit_log_ratio = log_ratio.detach()
    log_ratio = torch.where(valid, log_ratio, zero)  # [B, T]
    return BehaviourView(
        valid=valid,
        m=m,
        n_tokens=n_tokens,
        row_valid=n_tokens > 0,
        logp=logp,
        log_ratio=log_ratio,
        log_ratio_old=torch.where(valid, logp - old, zero),
        seq_logp=seq_logp,
        seq_logq=seq_logq,
        unit_len=unit_len,
        unit_log_ratio=torch.where(valid, unit_log_ratio, zero),
        advantages=inputs.advantages.detach().to(torch.float32),
        totals=inputs.totals or BatchTotals(len(n_tokens), int(n_tokens.sum()), int(n_tokens.max())),
    )


def safe_exp(log_x: Tensor) -> Tensor:
    """exp of a log-ratio clamped to ±LOG_RATIO_BOUND (no gradient beyond the bound)."""
    return torch.exp(log_x.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))


def k3(log_q_over_p: Tensor) -> Tensor:
    """Schulman's k3 estimator e^x − x − 1 of KL(p‖q) per sample, x = log q − log p (≥ 0)."""
    x = log_q_over_p.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    # e^x − x − 1 cancels in float32 for small |x| (the usual case: π_θ ≈ π_old), so there the
    # Taylor series is used; its truncation error at |x| = 0.01 is ~1e-8 relative.
    series = x * x * (0.5 + x * (1.0 / 6.0 + x / 24.0))
    return torch.where(x.abs() < 1e-2, series, torch.expm1(x) - x)


def row_mean(x: Tensor, view: BehaviourView) -> Tensor:
    """[B, T] → [B]: (1/|y_i|) Σ_t m_{i,t} x_{i,t}; 0 for an empty row."""
    return (x * view.m).sum(dim=1) / view.n_tokens.clamp(min=1.0)


def reduce_tokens(x: Tensor, view: BehaviourView, norm: Norm, max_len: int | None = None) -> Tensor:
    """Per-token loss [B, T] → this batch's share of the step's scalar loss.

    With N rows, K tokens and longest completion L in the whole step (`view.totals`):
    seq:   (1/N) Σ_i (1/|y_i|) Σ_t x_{i,t}         (GRPO; F-TIS's (1/G) Σ_i (1/|a_i|) Σ_t)
    token: Σ_{i,t} x_{i,t} / K                       (DAPO token mean)
    dr:    Σ_{i,t} x_{i,t} / (N · max_len)           (Dr.GRPO; max_len = L when None)
    """
    t = view.totals
    if norm == "seq":
        return row_mean(x, view).sum() / t.rows
    if norm == "token":
        return (x * view.m).sum() / max(t.tokens, 1)
    if norm == "dr":
        return (x * view.m).sum() / (t.rows * (max_len if max_len is not None else max(t.max_len, 1)))
    raise ValueError(f"unknown normalisation {norm!r}; expected seq, token or dr")


def reduce_rows(per_row: Tensor, view: BehaviourView) -> Tensor:
    """Per-row loss [B] → this batch's share of (1/N) Σ_i loss_i over the step's N rows (empty rows: 0)."""
    return (per_row * view.row_valid).sum() / view.totals.rows


def clipped_surrogate(ratio: Tensor, adv: Tensor, eps_low: float, eps_high: float,
                      dual_clip: float | None = None) -> tuple[Tensor, Tensor]:
    """PPO surrogate −min(r·A, clip(r, 1−ε_low, 1+ε_high)·A), elementwise (adv broadcasts).

    `dual_clip` c (dual-clip PPO, Ye et al. 2020, c > 1): where A < 0 the loss is also capped at
    −c·A, so a token's gradient weight is at most c (none beyond r > c) instead of r up to e^20 on
    PPO's unclipped side. Returns the loss and a bool tensor: True where a clip removes the gradient.
    """
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high) * adv
    loss = -torch.minimum(unclipped, clipped)
    removed = clipped < unclipped
    if dual_clip is not None:
        cap = -dual_clip * adv  # > 0 where A < 0
        capped = (adv < 0) & (cap < loss)
        loss = torch.where(capped, cap.expand_as(loss), loss)
        removed = removed | capped
    return loss, removed.detach()


def masked_stats(values: Tensor, where: Tensor) -> tuple[float, float, float]:
    """(mean, population variance, max) of values[where] in float64; zeros when nothing is selected."""
    v = values.detach()[where].to(torch.float64)
    if v.numel() == 0:
        return 0.0, 0.0, 0.0
    mean = v.mean()
    return float(mean), float(((v - mean) ** 2).mean()), float(v.max())


def _masked_mean(x: Tensor, where: Tensor) -> float:
    v = x.detach()[where].to(torch.float64)
    return float(v.mean()) if v.numel() else 0.0


def loss_metrics(
    inputs: LossInputs,
    view: BehaviourView,
    weight: Tensor,
    weight_where: Tensor,
    clipped: Tensor,
    filtered: Tensor | None = None,
    cap: float | None = None,
) -> dict[str, float]:
    """The metrics every loss reports.

    weight, weight_where, clipped: the importance weight this loss applies, where it is defined
      (tokens [B, T] or sequences [B]) and where it was clipped or truncated.
    filtered: [B] bool rows whose advantage a filter zeroed (None: no filter).
    cap: the largest weight the loss can give any token's gradient (grpo's dual clip): the
      is_weight_* statistics report min(weight, cap), what the optimizer could use, so a peer's
      claimed μ cannot blow them up; the extremes are counted instead (is_weight_extreme: tokens
      whose π_θ/μ exceeds EXTREME_WEIGHT, before any clip).
    """
    if cap is not None:
        weight = weight.detach().clamp(max=cap)
    w_mean, w_var, w_max = masked_stats(weight, weight_where)
    ext_rows = inputs.is_external if weight_where.dim() == 1 else inputs.is_external[:, None]
    w_external = masked_stats(weight, weight_where & ext_rows)[0]
    w_external_share = _masked_mean((weight.detach() >= NOT_NEGLIGIBLE).to(torch.float32), weight_where & ext_rows)
    # KL(μ‖π_θ) per token from μ's samples: E_μ[r − 1 − log r] with r = π_θ/μ (k3 of log r), over the tokens
    # whose r is not extreme (those are counted in is_weight_extreme: one claimed μ would otherwise set it)
    kl_tok = k3(view.log_ratio.detach())  # [B, T]
    extreme = view.valid & (view.log_ratio.detach() > math.log(EXTREME_WEIGHT))
    counted = view.valid & ~extreme
    external = inputs.is_external[:, None] & counted
    return {
        "is_weight_mean": w_mean,
        "is_weight_var": w_var,
        "is_weight_max": w_max,
        "is_weight_external": w_external,  # mean weight on peers' rows (0 when there are none)
        "is_weight_external_share": w_external_share,  # share of those weights ≥ NOT_NEGLIGIBLE
        "clip_frac": _masked_mean(clipped.to(torch.float32), weight_where),
        "filtered_frac": 0.0 if filtered is None else float(filtered.to(torch.float32).mean()),
        "kl_beh": _masked_mean(kl_tok, counted),
        "kl_beh_local": _masked_mean(kl_tok, counted & ~external),
        "kl_beh_external": _masked_mean(kl_tok, external),
        "kl_old": _masked_mean(k3(-view.log_ratio_old.detach()), view.valid),
        # a count, summed over a step's micro-batches: tokens a peer's claimed μ makes look extreme
        "is_weight_extreme": float(extreme.sum()),
        "tokens": float(view.m.sum()),
    }


def log_or_neg_inf(x: float) -> float:
    """math.log that maps 0 to −inf (for mixing coefficients that may be exactly 0)."""
    return math.log(x) if x > 0 else -math.inf
