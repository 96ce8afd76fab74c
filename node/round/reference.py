"""The reference policy π_ref of a KL penalty (grpo `beta` > 0): the weights training started from.

LoRA: the base model with the adapter disabled — no copy, the same weights the adapter sits on.
Full fine-tuning: a frozen copy of the initial weights (one more model in memory).
Either way it is only ever scored under no_grad (node.round.train.frozen_scores).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch

from node.round.logprobs import TokenRow, score_rows

Scorer = Callable[[list[TokenRow], float, int], tuple[torch.Tensor, torch.Tensor]]


def build_reference(model: torch.nn.Module) -> Scorer | torch.nn.Module:
    """A scorer of TokenRows under the reference policy (the model as it is now, before training)."""
    if hasattr(model, "disable_adapter"):  # a peft model: its base is the reference
        def score(rows: list[TokenRow], temperature: float, pad_id: int):
            with model.disable_adapter():
                return score_rows(model, rows, temperature, pad_id)

        return score
    frozen = copy.deepcopy(model)
    for p in frozen.parameters():
        p.requires_grad_(False)
    return frozen
