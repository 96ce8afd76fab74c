"""A floor on what a peer's row may teach, a filter of any loss's inputs: `train.peer_token_floor: p`.

    peer's row i, token t:  π_old(y_i,t) < p  ⇒  no gradient through log π_θ(y_i,t), nor through any
                            later token of row i (`train.peer_floor_span: rest`, the default; `token`:
                            that token only)

π_old is this node's own policy at the start of the step (`LossInputs.logp_old`: log_softmax(logits / T),
the distribution it samples from; on a round's single step it is sg(π_θ) of the step's forward). A token
the floor takes has its log π_θ replaced by sg(log π_θ), so every value the loss computes — the
importance weight π_θ/μ, the surrogate, the F-TIS filter's statistic, the metrics, the row's token
count — is what it was; only the gradient is gone. The node's own rows are never touched. It applies
to the base loss and to every term of the loss that reads peers' rows (losses/compose.py: it is the
loss's input filter), the imitation term of `train.imitate` (losses/imitation.py) included.

Why. A receiver verifies only a completion's final answer, and a peer's row trains the whole
completion: under F-TIS at weight w = min(π_θ/μ, C) with a μ the sender claims (a claimed log μ of
−30 gives every token w = C = 2), under `train.imitate` at weight 1. A correct answer preceded by
text of the sender's choosing therefore pushes that text into the receiver's model, round after
round (docs/benchmarks/reliability.md §15C: measured on the lab model). The tokens of such text are ones the
receiver would almost never write (lab-spell gives each token of "PWN " 1e-5 to 2e-3), while the
tokens of an honest peer's correct answer on lab-spell are mostly ones it would: a peer may move
only tokens this node's own policy would plausibly write. How much of an honest peer's rows that
leaves depends on the model: on lab-spell the floor 0.01 (span rest) takes 3–7 % of the tokens of
rows that scored above their group, on SmolLM2-135M at T = 1 62 % (bench/learning/plausibility.py,
docs/benchmarks/reliability.md §15C).

Why the rest of the row and not only the token: a token trains the model twice, as a prediction and
as the context of every later prediction. With lab-spell (input and output embeddings tied) the
tokens of an injected prefix, stripped of their own gradient, still rose through the answer trained
after them (bench/reliability/injection.py's docstring); text that follows what this node would not write is
conditioned on it, so none of it trains.

What it bounds, and what not. With span rest a peer's row trains only its opening up to the first token
the node gives < p: from that token on, a peer's text gets no gradient, neither as predictions nor as
context, so the probability of an injected text holding such a token rises only through its opening
before that token and as the node's own training moves it (measured in §15C). A text each of whose
tokens is at or above p — one the node already writes now and then — can still be pushed up, as honest
learning pushes it up: the floor decides what a peer may teach, not whether it is true. Nor does it stop
a hostile peer's rows from taking places in the step that honest rows would have had.

This is this project's own departure from F-TIS and from SAPO, not either paper's method. F-TIS
(Key Design 2 and its loss) trains every token of a positive-advantage row at min(π_θ/π_gen, C),
"useful even if off-policy", and filters only whole negative-advantage rows by a sequence KL; SAPO
trains a peer's rows as on-policy. Here, on peers' rows of either sign, the tokens the floor takes get
weight 0 whatever π_θ/μ is — by the node's own probability of the token, never by the sender's μ,
which is a claim. A teacher is a peer too: with the floor set, the distillation term (losses/distill.py) gives
no gradient to the node's own tokens below it either (`floor_tokens` on its own rows), so a teacher's values
move only tokens the node would plausibly write. Metric: `floored_share_external`, the share of peers' tokens in the step that the
floor took the gradient from.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from losses.base import LossInputs
from losses.compose import as_loss


def floor_tokens(inputs: LossInputs, floor: float, span: str, rows: torch.Tensor) -> tuple[LossInputs, torch.Tensor]:
    """(inputs with sg(log π_θ) on the tokens of `rows` ([B] bool) the floor takes, those tokens as a [B, T] mask).

    span "token": each token whose π_old < floor; "rest": that token and every later one of its row.
    """
    valid = inputs.mask != 0
    low = valid & rows[:, None].to(valid.device) & (inputs.logp_old.detach() < math.log(floor))
    if span == "rest":
        low = valid & (torch.cumsum(low.to(torch.int32), dim=1) > 0)
    logp = torch.where(low, inputs.logp.detach(), inputs.logp)
    return dataclasses.replace(inputs, logp=logp), low


def floor_peer_tokens(inputs: LossInputs, floor: float, span: str = "rest") -> tuple[LossInputs, torch.Tensor]:
    """floor_tokens on the peers' rows: what the loss may not push (module docstring)."""
    return floor_tokens(inputs, floor, span, inputs.is_external)


@dataclass(frozen=True)
class PeerFloor:
    """floor_peer_tokens as an input filter of losses.compose.Loss, with its metric: the base loss and every
    filtered term (losses.imitation's) see the floored inputs."""

    floor: float
    span: str = "rest"

    def __post_init__(self) -> None:
        if not 0 < self.floor < 1:
            raise ValueError(f"peer_token_floor must lie in [0, 1), not {self.floor!r}")
        if self.span not in ("rest", "token"):
            raise ValueError(f"peer_floor_span must be rest or token, not {self.span!r}")

    def __call__(self, inputs: LossInputs) -> tuple[LossInputs, dict]:
        floored, low = floor_peer_tokens(inputs, self.floor, self.span)
        ext_tokens = float(((inputs.mask != 0) & inputs.is_external[:, None].to(low.device)).sum())
        share = float(low.sum()) / ext_tokens if ext_tokens else 0.0
        return floored, {"floored_share_external": share}


def with_peer_floor(loss_fn, floor: float, span: str = "rest"):
    """`loss_fn` (a losses.compose.Loss, or a base loss) whose inputs pass PeerFloor(floor, span) first (`loss_fn`
    itself when floor is 0)."""
    if floor == 0:
        return loss_fn
    return as_loss(loss_fn).with_filter(PeerFloor(floor, span))
