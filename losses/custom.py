"""A loss of the user's own, by import path (`loss: {name: mypkg.losses:my_loss, clip: 2.0}`).

The function receives the same `LossInputs` as the built-in losses and returns `LossOutputs`:

    def my_loss(inputs: LossInputs, *, clip: float = 2.0) -> LossOutputs

Every key of the `loss` section other than `name` is passed as a keyword argument; they are
checked against the function's signature when the node starts. Contract (examples/custom_loss.py
shows it):
  - `loss` is a scalar tensor with a gradient through `inputs.logp`;
  - the trainer may split one optimizer step into micro-batches and *sums* their losses, so a
    loss divides by the whole step's sizes in `inputs.totals` (rows, tokens, longest completion;
    `losses.base.BatchTotals`), never by the micro-batch's own; `behaviour_view(inputs).totals`
    and `losses.base.reduce_tokens` / `reduce_rows` do it;
  - μ is read through `losses.base.behaviour_view`, which handles rows from another tokenizer;
  - `metrics` are floats (`loss_metrics` gives the ones every built-in loss reports); over a step's
    micro-batches, one the round record declares (node/round/record.py, docs/ROUNDS.md) combines as declared,
    one of your own by rows unless `LossOutputs.combine` names it "max", "sum", "peer rows" or "own rows".
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch

from losses.base import LossInputs, LossOutputs
from losses.config import CustomLossConfig
from losses.plugin import PluginError, load_object


class CustomLoss:
    """`fn(inputs) -> LossOutputs` around the user's function, checking what it returns."""

    def __init__(self, cfg: CustomLossConfig):
        self.name = cfg.name
        self.fn: Callable[..., LossOutputs] = load_object(cfg.name, "loss")
        self.kwargs = cfg.kwargs
        try:
            inspect.signature(self.fn).bind(None, **self.kwargs)
        except TypeError as exc:
            raise PluginError(f"loss {cfg.name!r} does not take these arguments {sorted(self.kwargs)}: {exc}") from None
        except ValueError:  # a builtin without a signature: checked on the first call instead
            pass

    def __call__(self, inputs: LossInputs) -> LossOutputs:
        out = self.fn(inputs, **self.kwargs)
        if not isinstance(out, LossOutputs):
            raise TypeError(f"loss {self.name!r} returned {type(out).__name__}, not losses.LossOutputs")
        if not isinstance(out.loss, torch.Tensor) or out.loss.dim() != 0:
            raise TypeError(f"loss {self.name!r}: LossOutputs.loss must be a scalar tensor")
        return out

    def __repr__(self) -> str:
        return f"CustomLoss({self.name!r}, {self.kwargs})"
