"""On-policy distillation from a teacher, a term added to any loss: a per-token reverse-KL advantage.

On the student's own samples y ~ π_old, a teacher gives log π_T(y_t | x, y_<t) of each token
(node.distill.score; carried on LossInputs as `logp_teacher`, with `teacher_scored` marking the
tokens it scored). The advantage of token t becomes

    A_t = A_reward − λ · (log π_old(y_t) − log π_T(y_t))

and the loss is the policy gradient with that per-token advantage. Since the reward part is the
row's A_i on every token, the loss splits into the base loss (reward advantage, unchanged) plus

    L_distill = (1/N) Σ_i (1/|y_i|) Σ_{t scored} −min(R_t·(−λ d_t), clip(R_t, 1−ε, 1+ε)·(−λ d_t)),
    d_t = sg(log π_old(y_t) − log π_T(y_t)),   R_t = π_θ(y_t) / π_old(y_t)

(value R = 1 on the round's first step, gradient ∇log π_θ). E_{y~π_old}[Σ_t d_t] is the sequence's
reverse KL, KL(π_old ‖ π_T); pushing each token by −λ·d_t is the policy gradient of −λ times that KL
with d_t as a per-token reward (no discounting): tokens the teacher finds likelier than the student
does are pushed up, the others down. Tokens without a teacher score (`teacher_scored` False, a
completion the teacher could not align, or no teacher answer in time) get the reward advantage
alone, and so do peers' rows: the KL is estimated only from samples of the student's own policy.

Across tokenizers the teacher scores chunks of text both tokenizations end at, not the student's
tokens (node.distill.score), and `teacher_chunk` names the chunk of each token. Then d_t above is
replaced on every token t of a chunk c by the chunk's gap

    d_c = Σ_{s ∈ c} log π_old(y_s) − log π_T(c)

— the policy gradient of the chunk-level reverse KL with d_c as the reward of the chunk's tokens, as
§6's `chunks` mode gives every token of a chunk the chunk's ratio. (This module first used per-token gaps against
an even spread of log π_T(c); both forms made a student's KL to a stronger teacher of another
tokenizer grow and cost it held-out accuracy, docs/benchmarks/learning.md §12E, where a suspected cause is
named: the teacher scores its canonical tokenization of the text, the student its sampled tokens.)
With one token per chunk (the same tokenizer) d_c = d_t.

How the chunk's gap reaches its tokens is `signal` (`distill.cross_signal`; all three are the one-token gap d_t
when every chunk is one token and no token is marked EOS or OFF_SPLIT, so the id path — one tokenizer, which marks
none — is the same under each: tests/unit/node/test_distill_signal.py; the byte path at one tokenizer, `send_ids` false,
marks them and differs there):
- `chunk` (today's default): d_c on every token of c, as above; our final EOS inside the gap (the byte path's
  `requester` split scores the teacher's EOS against it as a chunk of its own).
- `dpca`: DPCA's credit. Each token i of c gets d_c · log p_i / L_S(c), L_S(c) = Σ_{t ∈ c} log p_t (p = π_old): the
  teacher's chunk value spread over the chunk's tokens in proportion to their own log-probabilities, then one-token
  OPD — the credit (L_T / L_S − 1)·log p_i, adding up to d_c over the chunk instead of n_c·d_c. A near-certain
  token (log p ≈ 0) of a chunk takes almost none of it. And the end has its own term: a token marked EOS
  (`teacher_kind`: our final EOS when it is a chunk of its own, node.distill.student) takes, in place of a gap, the
  gradient of the forward KL between the two stop probabilities, KL(Bern(p_T) ‖ Bern(p_S)) with p_S = π_old(EOS),
  p_T = π_T(EOS): ∂/∂log p_S = −p_T + (1 − p_T)·p_S / (1 − p_S) (`eos_coefficient`; metric `distill_eos_kl`).
- `exact`: `dpca`, and a token marked OFF_SPLIT — where our sampled split of the text is not our tokenizer's own
  tokenization of it — gets the gap OFF_SPLIT_GAP, which the token clip then bounds: the teacher's text distribution
  written in our tokenization (our tokenizer applied to the teacher's texts) gives such a token sequence
  probability 0. docs/benchmarks/learning.md §12F measures what a student is paid for such splits under each signal.
Every bound below applies to every signal's gaps, the EOS term's included.

Sources. The estimator is on-policy distillation as Thinking Machines describe it ("On-Policy
Distillation", 2025: per-token reverse KL log π_student − log π_teacher on the student's own
samples as a negative per-token advantage, importance-sampled against the sampling policy) and as
KDRL combines it with a GRPO reward (arXiv 2506.02208: the reward advantage plus a reverse-KL term
weighted by a coefficient with a schedule); across tokenizers the gap is taken per chunk of text,
after ALM's chunk-level likelihood matching (arXiv 2503.20083).

The cross-tokenizer signals follow three methods that need only per-token log-probabilities of the student's
text on the wire: DPCA (arXiv 2606.09456: the per-token credit above, and a forward-KL term on EOS), ALM (arXiv
2503.20083: chunk likelihoods matched) and exact scoring of one tokenizer's sequences under another's BPE (arXiv
2512.14954). Departures of these signals, all ours: `dpca` is DPCA's credit used as a per-token advantage
of this module's clipped policy gradient (not a loss of its own), with π_old's log-probabilities; where
|L_S(c)| < 1e-6 the chunk's gap is shared equally; the EOS term is measured only where the student ended (a
truncated completion has no EOS term: its π(EOS) at other positions is not in the batch) and enters as the
gradient's coefficient on log p_S, clipped like a gap, not as a loss. `exact` is not the exact conversion of the
teacher into a next-token distribution over our vocabulary (which needs the teacher's probabilities of every
continuation): it keeps the chunk values for canonical tokens and only gives an off-split token the probability 0
that conversion would give its sequence, as the clipped gap. ALM's binarised f-divergence loss and its dropping of
chunks whose tokenization bias differs are not built.

Departures, all ours:
- The student's log-probability is π_old (the policy at the start of the round's steps, what
  sampled the rows on the round's first step), not the sampler's μ: the two agree for the node's own
  rows up to float error, and π_old is what the trust-region ratio is taken against.
- The reward part keeps the base loss's own clip and normalisation; the distillation part has its
  own PPO clip (ε, 0.2 by default) on R and the sequence mean (seq) of every loss here, or the
  `norm` given. This is not one clipped surrogate of the summed advantage A_t: a token whose
  reward part is clipped still gets its distillation part, and the reverse.
- KDRL compares KL estimators (k2, k3) used as a loss term with a gradient of their own; here the
  KL enters only as a stop-gradient advantage (k1 as a per-token reward, as in the on-policy
  distillation write-up).
- λ is a plain number per step; `linear_lambda` is the schedule helper (linear from `start` to
  `end` over `steps`, then constant), which the caller evaluates each round.
Bounds (ours, TeacherBounds; a teacher's values cannot be re-verified, docs/ARCHITECTURE.md §4). On every
row, in this order: each token's gap d (d_c on a chunk's tokens) is clipped to ±`token` nats
(`distill.max_token_gap`, 10); a row whose Σ_t |d_t| exceeds `completion` nats (`distill.max_completion_gap`,
100) has its gaps scaled down to that total; then the sign guard, a dual clip on the row's combined
advantage: a row with A_i > 0 whose teacher part Σ_t τ_t (τ_t = −λ·d_t) is below −A_i·|y_i| has τ scaled so the
row's Σ_t (A_i + τ_t) is 0, and likewise a row with A_i < 0 whose Σ τ is above |A_i|·|y_i| — so the teacher
alone never turns a rewarded answer into one the step pushes down, nor a failed one into one it pushes up,
while a group of equal rewards (A_i = 0) keeps the teacher's signal within the two clips. With
`train.peer_token_floor` set, the term gives no gradient to own tokens whose π_old is below it (losses/peer_floor.py
`floor_tokens`; span as `train.peer_floor_span`). Where no bound binds, τ_t is exactly −λ·d_t.
Metrics: `distill_kl` (mean d_t over the scored own tokens, before the bounds: the per-token reverse-KL
estimate), `distill_scored_share` (scored own tokens / own tokens), `distill_lambda`, and what the bounds took:
`distill_clipped_share` (scored tokens whose gap was clipped), `distill_capped_share` and `distill_guarded_share`
(rows with a score whose total was scaled, whose sign the guard kept).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from losses.base import (
    LossInputs,
    LossOutputs,
    Norm,
    behaviour_view,
    clipped_surrogate,
    reduce_tokens,
    safe_exp,
)
from losses.compose import as_loss
from losses.peer_floor import floor_tokens

MAX_TOKEN_GAP = 10.0  # nats: |log π_old − log π_T| of one token at most (node.distill.config repeats the defaults)
MAX_COMPLETION_GAP = 100.0  # nats: Σ_t |log π_old − log π_T| of one completion at most


def linear_lambda(step: int, *, start: float, end: float, steps: int) -> float:
    """λ at `step`: `start` at 0, linear to `end` at `steps`, `end` after (steps ≤ 0: `end`)."""
    if steps <= 0 or step >= steps:
        return end
    return start + (end - start) * max(step, 0) / steps


def teacher_mask(inputs: LossInputs) -> Tensor:
    """[B, T] bool: the tokens of the node's own rows that carry a teacher score (none without scores)."""
    valid = inputs.mask != 0
    if inputs.logp_teacher is None or inputs.teacher_scored is None:
        return torch.zeros_like(valid)
    B, T = valid.shape
    for name, t in (("logp_teacher", inputs.logp_teacher), ("teacher_scored", inputs.teacher_scored)):
        if not isinstance(t, Tensor) or tuple(t.shape) != (B, T):
            raise ValueError(f"LossInputs.{name} must have shape {(B, T)}")
    scored = valid & inputs.teacher_scored.bool() & ~inputs.is_external[:, None]
    if not bool(torch.isfinite(inputs.logp_teacher.detach()[scored]).all()):
        raise ValueError("LossInputs.logp_teacher holds NaN or inf on scored tokens")
    return scored


SIGNALS = ("chunk", "dpca", "exact")  # distill.cross_signal: how a chunk's gap reaches its tokens (module docstring)
TEXT, EOS, OFF_SPLIT = 0, 1, 2  # LossInputs.teacher_kind of a scored token (byte path; node.distill.student)
OFF_SPLIT_GAP = 1e4  # nats: an off-split token's gap under `exact` (log 0 as a teacher may send it, −1e4), then clipped


def chunk_gap(gap: Tensor, scored: Tensor, chunk: Tensor | None) -> Tensor:
    """d_c = Σ_{t ∈ c} d_t on every scored token of its chunk c (`chunk`: [B, T] the chunk of each token; None:
    one token per chunk, `gap` itself)."""
    if chunk is None:
        return gap
    if tuple(chunk.shape) != tuple(gap.shape) or chunk.dtype.is_floating_point:
        raise ValueError(f"LossInputs.teacher_chunk must be an integer tensor of shape {tuple(gap.shape)}")
    idx = chunk.long().clamp(0, gap.shape[1] - 1)
    sums = torch.zeros_like(gap).scatter_add(1, idx, torch.where(scored, gap, 0.0))
    return torch.where(scored, sums.gather(1, idx), gap)


def dpca_gap(gap: Tensor, scored: Tensor, chunk: Tensor | None, logp_old: Tensor) -> Tensor:
    """DPCA's credit as a gap: each scored token i of chunk c gets d_c · log p_i / L_S(c), L_S(c) = Σ_{t ∈ c} log p_t
    (p = π_old; the teacher's chunk value spread over the chunk's tokens in proportion to their own log-probabilities,
    then one-token OPD), so a chunk's gaps add up to d_c; d_c / n_c each where |L_S(c)| < 1e-6. One token per chunk
    (`chunk` None, or every chunk of one token): `gap` itself."""
    if chunk is None:
        return gap
    idx = chunk.long().clamp(0, gap.shape[1] - 1)
    lp = torch.where(scored, logp_old.float(), 0.0)
    one = scored.float()

    def per_chunk(x: Tensor) -> Tensor:
        return torch.zeros_like(gap).scatter_add(1, idx, x).gather(1, idx)

    d_c, l_s, n_c = per_chunk(torch.where(scored, gap, 0.0)), per_chunk(lp), per_chunk(one)
    flat = l_s.abs() < 1e-6
    share = torch.where(flat, 1.0 / n_c.clamp(min=1.0), lp / torch.where(flat, 1.0, l_s))
    return torch.where(scored, d_c * share, gap)


def eos_coefficient(logp_old: Tensor, logp_teacher: Tensor) -> tuple[Tensor, Tensor]:
    """(∂/∂log p_S of KL(Bern(p_T) ‖ Bern(p_S)), that KL) at a final EOS: p_S = π_old(EOS), p_T the teacher's
    probability of ending there; the coefficient −p_T + (1 − p_T)·p_S / (1 − p_S) takes the place of the gap."""
    p_s = logp_old.float().exp().clamp(1e-12, 1 - 1e-6)
    p_t = logp_teacher.float().exp().clamp(1e-12, 1 - 1e-6)
    coef = -p_t + (1 - p_t) * p_s / (1 - p_s)
    kl = p_t * (p_t.log() - p_s.log()) + (1 - p_t) * ((1 - p_t).log() - (1 - p_s).log())
    return coef, kl


def signal_gap(inputs: LossInputs, scored: Tensor, signal: str) -> tuple[Tensor, Tensor]:
    """(the gap of every scored token under `signal`, before the bounds; [B, T] bool: final EOS tokens given the
    EOS term). `chunk`: today's chunk gap, teacher_kind ignored. `dpca`: dpca_gap on text tokens, the forward-KL
    coefficient of eos_coefficient on EOS tokens. `exact`: dpca, and a token of a split that is not our tokenizer's
    own of its text (OFF_SPLIT) gets the gap OFF_SPLIT_GAP, which the clip then bounds: the teacher's text
    distribution written in our tokenization gives that token sequence probability 0."""
    if signal not in SIGNALS:
        raise ValueError(f"the cross-tokenizer signal must be one of {SIGNALS}, not {signal!r}")
    logp_old = inputs.logp_old.detach().float()
    gap = torch.where(scored, logp_old - inputs.logp_teacher.detach().float(), 0.0)
    kind = inputs.teacher_kind
    if signal == "chunk" or kind is None:
        gap = chunk_gap(gap, scored, inputs.teacher_chunk) if signal == "chunk" else \
            dpca_gap(gap, scored, inputs.teacher_chunk, logp_old)
        return gap, torch.zeros_like(scored)
    if tuple(kind.shape) != tuple(gap.shape):
        raise ValueError(f"LossInputs.teacher_kind must have shape {tuple(gap.shape)}")
    eos = scored & (kind == EOS)
    text = scored & ~eos
    gap = dpca_gap(torch.where(text, gap, 0.0), text, inputs.teacher_chunk, logp_old)
    coef, _ = eos_coefficient(logp_old, inputs.logp_teacher.detach())
    gap = torch.where(eos, coef, gap)
    if signal == "exact":
        gap = torch.where(text & (kind == OFF_SPLIT), torch.full_like(gap, OFF_SPLIT_GAP), gap)
    return gap, eos


@dataclass(frozen=True)
class TeacherBounds:
    """What a teacher's values can do to one row (module docstring, "Bounds"): the per-token gap within ±`token`
    nats, the completion's Σ_t |gap| within `completion` nats, the sign guard, and (`floor` > 0) no gradient of the teacher's term
    on our tokens whose π_old < floor (`span` rest: nor on later tokens of the row), as train.peer_token_floor
    does to peers' rows (losses/peer_floor.py)."""

    token: float = MAX_TOKEN_GAP
    completion: float = MAX_COMPLETION_GAP
    floor: float = 0.0
    span: str = "rest"
    guard: bool = True  # the sign guard (no config turns it off; UNBOUNDED does, for tests of the bare estimator)

    def __post_init__(self) -> None:
        if not (self.token > 0 and self.completion > 0):
            raise ValueError(f"the teacher's gap bounds must be > 0, not {self.token!r} and {self.completion!r}")
        if not 0 <= self.floor < 1 or self.span not in ("rest", "token"):
            raise ValueError(f"floor must lie in [0, 1) and span be rest or token, not {self.floor!r}, {self.span!r}")


UNBOUNDED = TeacherBounds(token=float("inf"), completion=float("inf"), guard=False)  # the bare estimator (tests)


def teacher_advantages(inputs: LossInputs, lam: float, bounds: TeacherBounds = TeacherBounds(),
                       signal: str = "chunk") -> tuple[Tensor, Tensor, dict[str, float]]:
    """(τ [B, T] the teacher's part of each token's advantage, −λ·d with every bound applied, 0 off the scored own
    tokens; the scored mask; counts of what the bounds took). No gradient. `signal`: signal_gap."""
    scored = teacher_mask(inputs)
    stats = {"clipped": 0.0, "capped": 0.0, "guarded": 0.0, "rows": float(scored.any(dim=1).sum())}
    if not bool(scored.any()):
        return torch.zeros(scored.shape, device=scored.device), scored, stats
    gap, _ = signal_gap(inputs, scored, signal)
    stats["clipped"] = float((scored & (gap.abs() > bounds.token)).sum())
    gap = torch.where(scored, gap.clamp(-bounds.token, bounds.token), 0.0)
    total = gap.abs().sum(dim=1)  # Σ_t |d_t| of each row
    cap = torch.where(total > bounds.completion, bounds.completion / total.clamp(min=1e-30), 1.0)
    stats["capped"] = float((cap < 1).sum())
    tau = -lam * gap * cap[:, None]
    # the sign guard: the row's Σ_t (A_i + τ_t) keeps A_i's sign (or reaches 0), whatever the teacher says
    adv = inputs.advantages.detach().float()
    room = adv.abs() * (inputs.mask != 0).sum(dim=1).float()  # |A_i|·|y_i|: what the teacher may take back
    push = tau.sum(dim=1)
    against = (((adv > 0) & (push < -room)) | ((adv < 0) & (push > room))) & bounds.guard
    stats["guarded"] = float(against.sum())
    tau = tau * torch.where(against, room / push.abs().clamp(min=1e-30), 1.0)[:, None]
    return tau, scored, stats


def distill_advantages(inputs: LossInputs, lam: float, bounds: TeacherBounds = TeacherBounds(),
                       signal: str = "chunk") -> Tensor:
    """A_t [B, T] = A_i + τ_t (teacher_advantages) on scored own tokens, A_i elsewhere (no gradient)."""
    tau, scored, _ = teacher_advantages(inputs, lam, bounds, signal)
    adv = inputs.advantages.detach().float()[:, None].expand(scored.shape)
    return torch.where(scored, adv + tau, adv)


def distill_term(inputs: LossInputs, lam: float, eps: float = 0.2, norm: Norm = "seq",
                 bounds: TeacherBounds = TeacherBounds(), signal: str = "chunk") -> tuple[Tensor, dict]:
    """(L_distill, metrics) of the module docstring for one (micro-)batch."""
    tau, scored, stats = teacher_advantages(inputs, lam, bounds, signal)
    if bounds.floor > 0:  # our tokens below the floor (and, span rest, after one) keep their values, lose the push
        inputs, _ = floor_tokens(inputs, bounds.floor, bounds.span, ~inputs.is_external)
    view = behaviour_view(inputs)
    own = view.valid & ~inputs.is_external[:, None]
    gap = torch.zeros_like(view.m)  # d_t on scored tokens, 0 elsewhere (the KL estimate, before any bound)
    eos = torch.zeros_like(scored)  # final EOS tokens given the EOS term (signals dpca, exact on the byte path)
    eos_kl = None
    if bool(scored.any()):
        gap = torch.where(scored, inputs.logp_old.detach().float() - inputs.logp_teacher.detach().float(), 0.0)
        if signal != "chunk" and inputs.teacher_kind is not None:
            eos = scored & (inputs.teacher_kind == EOS)
            if bool(eos.any()):
                eos_kl = float(eos_coefficient(inputs.logp_old.detach(), inputs.logp_teacher.detach())[1][eos].mean())
    kl_tokens = scored & ~eos
    ratio = safe_exp(view.log_ratio_old)  # R = π_θ/π_old (grad), 1 in value on the round's first step
    per_token, _ = clipped_surrogate(ratio, tau.to(ratio.device), eps, eps)
    term = reduce_tokens(per_token * scored, view, norm)
    n_scored, n_own, rows = float(scored.sum()), float(own.sum()), stats["rows"]
    n_kl = float(kl_tokens.sum())
    metrics = {"distill_kl": float(gap[kl_tokens].mean()) if n_kl else 0.0,
               "distill_scored_share": n_scored / n_own if n_own else 0.0, "distill_lambda": float(lam),
               "distill_clipped_share": stats["clipped"] / n_scored if n_scored else 0.0,
               "distill_capped_share": stats["capped"] / rows if rows else 0.0,
               "distill_guarded_share": stats["guarded"] / rows if rows else 0.0}
    if eos_kl is not None:  # KL(Bern(p_T) ‖ Bern(p_S)) at the final EOS of rows given the EOS term
        metrics["distill_eos_kl"] = eos_kl
    return term, metrics


@dataclass(frozen=True)
class DistillTerm:
    """distill_term at λ = `lam` (a number, or a callable giving the current λ at each call), as a term of
    losses.compose.Loss. It reads only the node's own rows and floors them by its own `bounds`, so the loss's input
    filters (the peer floor on peers' rows) do not apply to it (`filtered` False): it sees the step's inputs."""

    lam: float | Callable[[], float]
    eps: float = 0.2
    norm: Norm = "seq"
    bounds: TeacherBounds = TeacherBounds()
    signal: str = "chunk"
    filtered = False
    needs_reference = False

    def __post_init__(self) -> None:
        if self.signal not in SIGNALS:
            raise ValueError(f"the cross-tokenizer signal must be one of {SIGNALS}, not {self.signal!r}")

    def __call__(self, inputs: LossInputs) -> tuple[Tensor, dict]:
        now = float(self.lam()) if callable(self.lam) else self.lam
        if now < 0:
            raise ValueError(f"the distillation coefficient must be >= 0, not {now!r}")
        return distill_term(inputs, now, self.eps, self.norm, self.bounds, self.signal)


def with_distillation(loss_fn, lam, eps: float = 0.2, norm: Norm = "seq", bounds: TeacherBounds = TeacherBounds(),
                      signal: str = "chunk"):
    """`loss_fn` (a losses.compose.Loss, or a base loss) with DistillTerm(lam, ...) added (`loss_fn` itself when lam
    is 0). `lam` is a number, or a callable giving the current λ at each call (a schedule the caller moves, e.g. with
    `linear_lambda`); `bounds` what a teacher's values can do (TeacherBounds); `signal` how a chunk's gap reaches its
    tokens (SIGNALS)."""
    if signal not in SIGNALS:
        raise ValueError(f"the cross-tokenizer signal must be one of {SIGNALS}, not {signal!r}")
    if not callable(lam):
        if lam < 0:
            raise ValueError(f"the distillation coefficient must be >= 0, not {lam!r}")
        if lam == 0:
            return loss_fn
    return as_loss(loss_fn).with_term(DistillTerm(lam, eps, norm, bounds, signal))
