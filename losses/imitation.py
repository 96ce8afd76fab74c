"""Imitation of peers' better answers, added to any loss: `train.imitate: lam`.

    loss = base(inputs)  −  lam · (1/N) Σ_{i external, A_i > 0} mean_t log π_θ(y_i,t)

(`train.imitate_rows: all` drops "external": the node's own above-mean rows too — the control that
separates what a peer's answers give from what the extra push on successes gives by itself.)
Rows the round marks not `imitable` are left out too: with `train.imitate_bar: own` (the default)
an answer must also score above the mean reward of the node's own rows in the step
(node.round.steps.imitate_bar), so a weaker peer's best answers, above their group but below what the
node writes, are not imitated (under partial credit they harmed: docs/benchmarks/learning.md §12D). A step
with no own rows (every own group dropped for equal rewards, or no own groups selected) has no such
bar: there the group's mean alone decides, as under `imitate_bar: group`.

N is the step's row count (the divisor of the sequence mean every loss here uses), so with lam = 1
a peer's completion that scored above its group's mean is pushed up as a policy-gradient row of
advantage 1 would be, with no importance weight. The base loss still sees every row as before (a
peer's rows under F-TIS keep their weight π/μ); the term is added on top, and never to the node's
own rows or to a peer's rows whose advantage is zero or negative.

Why a separate term. An unbiased importance weight makes a peer's rows estimate the receiver's own
on-policy gradient, so even a much stronger peer's rollouts are worth about as much as the
receiver's own samples (docs/benchmarks/learning.md §12C); taking all of them at weight 1 (NoIS) harms,
because the peer's wrong answers are pushed the peer's way too. Imitating only the rows the
receiver's own verifier scored above their group does teach a student of the same tokenizer (§12D:
+0.062 ± 0.030 held-out over the student alone, 8 seeds), but not by the peer's strength: an
untrained, frozen copy of the student sending as many groups helped as much (trained teacher − copy
+0.006 ± 0.013). What a peer adds is more correct answers to imitate than the node's own generation
gives; imitating its own above-mean answers lifts a node alone by about half as much.

This is the project's own method, not a paper's: reward-filtered imitation (rejection-sampling
fine-tuning) of other models' samples, added to the policy-gradient loss. For a peer of another
tokenizer the term imitates its re-tokenised text (ours); §12D found no gain across tokenizers.
Metrics: `imitation_share_external` (`_local`), the share of peers' (own) rows the term pushed up;
`imitation_barred_external`, the share of peers' rows above their group that the bar kept out.
"""

from __future__ import annotations

from dataclasses import dataclass

from losses.base import LossInputs, behaviour_view, reduce_rows
from losses.compose import as_loss


def imitation_term(inputs: LossInputs, rows: str = "peers") -> tuple:
    """(−(1/N) Σ_{A>0, external unless rows is "all"} mean_t log π_θ, the rows it covers as a [B] float mask)."""
    view = behaviour_view(inputs)
    chosen = view.advantages > 0
    if inputs.imitable is not None:
        chosen = chosen & inputs.imitable.to(chosen.device)
    if rows == "peers":
        chosen = chosen & inputs.is_external
    imitate = chosen.to(view.seq_logp.dtype)
    return reduce_rows(-view.seq_logp * imitate, view), imitate


@dataclass(frozen=True)
class ImitationTerm:
    """lam × imitation_term over `rows` (peers / all), with its metrics: a term of losses.compose.Loss that the
    loss's filters apply to (the peer floor takes the gradient of the peers' tokens it floors here too)."""

    lam: float
    rows: str = "peers"
    filtered = True
    needs_reference = False

    def __post_init__(self) -> None:
        if self.rows not in ("peers", "all"):
            raise ValueError(f"imitate_rows must be peers or all, not {self.rows!r}")

    def __call__(self, inputs: LossInputs) -> tuple:
        term, imitate = imitation_term(inputs, self.rows)
        ext = inputs.is_external.to(imitate.dtype)
        n_ext, n_own = float(ext.sum()), float((1 - ext).sum())
        metrics = {"imitation_share_external": float((imitate * ext).sum()) / n_ext if n_ext else 0.0}
        if inputs.imitable is not None:  # peers' above-group rows the bar (train.imitate_bar: own) kept out
            barred = (inputs.advantages > 0) & inputs.is_external & ~inputs.imitable.to(inputs.is_external.device)
            metrics["imitation_barred_external"] = float(barred.sum()) / n_ext if n_ext else 0.0
        if self.rows == "all":
            metrics["imitation_share_local"] = float((imitate * (1 - ext)).sum()) / n_own if n_own else 0.0
        return self.lam * term, metrics


def with_imitation(loss_fn, lam: float, rows: str = "peers"):
    """`loss_fn` (a losses.compose.Loss, or a base loss) with ImitationTerm(lam, rows) added (`loss_fn` itself
    when lam is 0)."""
    if lam == 0:
        return loss_fn
    return as_loss(loss_fn).with_term(ImitationTerm(lam, rows))
