"""Loss names → (config class, loss function), and the builders the node calls.

A loss is chosen by configuration only: `build_loss("f-tis", g=5, reduction="mean")` or, from
the node's YAML, `loss: {name: f-tis, g: 5, reduction: mean}` parsed as `LossConfig` (a pydantic
discriminated union on `name`) and passed to `build_loss_from_config`. The returned callable
is `fn(inputs: LossInputs) -> LossOutputs`, pure (no state, no logging). A name holding a colon
is a loss of the user's own by import path (losses.custom).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from losses.base import LossInputs, LossOutputs
from losses.config import (
    CONFIG_CLASSES,
    LOSS_NAMES,
    CustomLossConfig,
    parse_loss_config,
)
from losses.custom import CustomLoss
from losses.fis import fis_loss
from losses.gepo import gepo_loss
from losses.grpo import grpo_loss, pg_loss
from losses.gspo import gspo_loss

LossFn = Callable[[LossInputs], LossOutputs]

LOSS_FUNCTIONS: dict[str, Callable[[LossInputs, Any], LossOutputs]] = {
    "grpo": grpo_loss,
    "pg": pg_loss,
    "nois": fis_loss,
    "vis": fis_loss,
    "tis": fis_loss,
    "f-nois": fis_loss,
    "f-vis": fis_loss,
    "f-tis": fis_loss,
    "gspo": gspo_loss,
    "gepo": gepo_loss,
}
assert set(LOSS_FUNCTIONS) == set(LOSS_NAMES), "every config name needs a function"

def build_loss(name: str, **cfg: Any) -> LossFn:
    """`fn(inputs) -> LossOutputs` for loss `name` with keyword config (ValueError if invalid)."""
    return build_loss_from_config(parse_loss_config(name, **cfg))


def build_loss_from_config(cfg: BaseModel | Mapping[str, Any]) -> LossFn:
    """`fn(inputs) -> LossOutputs` from a parsed LossConfig (or a mapping with a `name` key)."""
    if isinstance(cfg, Mapping):
        if "name" not in cfg:
            raise ValueError(f"loss config needs a 'name', one of {', '.join(LOSS_NAMES)}, or module:function")
        cfg = parse_loss_config(**cfg)
    if isinstance(cfg, CustomLossConfig):
        return CustomLoss(cfg)
    if not isinstance(cfg, CONFIG_CLASSES):
        raise ValueError(f"not a loss config: {cfg!r}")
    fn = functools.partial(LOSS_FUNCTIONS[cfg.name], cfg=cfg)
    fn.needs_reference = getattr(cfg, "beta", 0.0) > 0 and cfg.name == "grpo"  # the trainer scores π_ref then
    return fn
