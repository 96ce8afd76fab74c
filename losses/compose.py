"""A node's loss as one object: a base loss, the terms added to it, and the filters its inputs pass.

    loss = Loss(base, terms=(ImitationTerm(1.0),), filters=(PeerFloor(0.01),))
    loss(inputs)      # LossOutputs: base(x) + Σ term(x) over the filtered x, + Σ term(inputs) of the own-row terms
    loss.needs_reference   # whether the trainer must score π_ref (the base's KL penalty), from the parts

The filters run first, in order, on the step's inputs (losses.peer_floor.PeerFloor: sg(log π_θ) on the peers'
tokens the floor takes); the base loss and every term with `filtered` True see what they leave. A term with
`filtered` False (losses.distill.DistillTerm, which reads only the node's own rows and applies its own floor,
TeacherBounds) sees the step's inputs as they came. The loss is the base's, then each filtered term added in
order, then each unfiltered term; the metrics are the base's, the filtered terms', the filters', the unfiltered
terms', in that order (a later key replaces an earlier one). `with_term` / `with_filter` give a new Loss with one
part more; losses.imitation.with_imitation, losses.peer_floor.with_peer_floor and losses.distill.with_distillation
build through them (node.assemble builds a node's loss: `build_node_loss`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from torch import Tensor

from losses.base import LossInputs, LossOutputs


class Term(Protocol):
    """A part added to the base loss: (its value, its metrics) for the inputs it is given."""

    filtered: bool  # whether the loss's input filters apply to its inputs
    needs_reference: bool  # whether it reads LossInputs.logp_ref

    def __call__(self, inputs: LossInputs) -> tuple[Tensor, dict[str, Any]]: ...


class Filter(Protocol):
    """What changes the inputs before the base loss and the filtered terms see them: (new inputs, metrics)."""

    def __call__(self, inputs: LossInputs) -> tuple[LossInputs, dict[str, Any]]: ...


@dataclass(frozen=True)
class Loss:
    """The base loss, the terms added to it and the filters of its inputs (module docstring)."""

    base: Callable[[LossInputs], LossOutputs]
    terms: tuple[Term, ...] = ()
    filters: tuple[Filter, ...] = ()

    @property
    def needs_reference(self) -> bool:
        """Whether the trainer must give π_ref: the base's own flag (losses.registry sets it), or any term's."""
        return bool(getattr(self.base, "needs_reference", False)) or any(t.needs_reference for t in self.terms)

    def with_term(self, term: Term) -> Loss:
        return replace(self, terms=(*self.terms, term))

    def with_filter(self, f: Filter) -> Loss:
        return replace(self, filters=(*self.filters, f))

    def __call__(self, inputs: LossInputs) -> LossOutputs:
        x, filter_metrics = inputs, {}
        for f in self.filters:
            x, m = f(x)
            filter_metrics.update(m)
        out = self.base(x)
        loss, metrics = out.loss, dict(out.metrics)  # the base's combine rules are its own (a term's are declared)
        for term in self.terms:
            if term.filtered:
                value, m = term(x)
                loss = loss + value
                metrics.update(m)
        metrics.update(filter_metrics)
        for term in self.terms:
            if not term.filtered:
                value, m = term(inputs)
                loss = loss + value
                metrics.update(m)
        return LossOutputs(loss, metrics, dict(out.combine))


def as_loss(loss_fn: Callable[[LossInputs], LossOutputs]) -> Loss:
    """`loss_fn` itself when it is a Loss, else a Loss of that base alone."""
    return loss_fn if isinstance(loss_fn, Loss) else Loss(loss_fn)
