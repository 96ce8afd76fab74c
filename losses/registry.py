"""Loss names → (config class, loss function), and the builders the node calls.

A loss is chosen by configuration only: `build_loss("f-tis", g=5, reduction="mean")` or, from
the node's YAML, `loss: {name: f-tis, g: 5, reduction: mean}` parsed as `LossConfig` (a pydantic
discriminated union on `name`) and passed to `build_loss_from_config`. The returned callable
is `fn(inputs: LossInputs) -> LossOutputs`, pure (no state, no logging).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Union

from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from losses.base import LossInputs, LossOutputs
from losses.fis import FISConfig, fis_loss
from losses.gepo import GEPOConfig, gepo_loss
from losses.grpo import GRPOConfig, PGConfig, grpo_loss, pg_loss
from losses.gspo import GSPOConfig, gspo_loss

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
LOSS_NAMES: tuple[str, ...] = tuple(LOSS_FUNCTIONS)

CONFIG_CLASSES = (GRPOConfig, PGConfig, FISConfig, GSPOConfig, GEPOConfig)
LossConfig = Annotated[Union[CONFIG_CLASSES], Field(discriminator="name")]
_ADAPTER: TypeAdapter = TypeAdapter(LossConfig)


def parse_loss_config(name: str, **cfg: Any) -> BaseModel:
    """Validate `cfg` for loss `name`; ValueError naming the loss and the offending field."""
    if name not in LOSS_FUNCTIONS:
        raise ValueError(f"unknown loss {name!r}; expected one of {', '.join(LOSS_NAMES)}")
    try:
        return _ADAPTER.validate_python({**cfg, "name": name})
    except ValidationError as e:
        raise ValueError(f"invalid config for loss {name!r}: {_describe(e)}") from None


def _describe(e: ValidationError) -> str:
    """One line per error: `field: message (got value)`; the union tag is dropped from the path."""
    parts = []
    for err in e.errors():
        loc = [str(x) for x in err["loc"][1:]]  # loc[0] is the discriminator tag
        where = ".".join(loc) or "config"
        msg = err["msg"].removeprefix("Value error, ")
        got = f" (got {err['input']!r})" if loc else ""
        parts.append(f"{where}: {msg}{got}")
    return "; ".join(parts)


def build_loss(name: str, **cfg: Any) -> LossFn:
    """`fn(inputs) -> LossOutputs` for loss `name` with keyword config (ValueError if invalid)."""
    return build_loss_from_config(parse_loss_config(name, **cfg))


def build_loss_from_config(cfg: BaseModel | Mapping[str, Any]) -> LossFn:
    """`fn(inputs) -> LossOutputs` from a parsed LossConfig (or a mapping with a `name` key)."""
    if isinstance(cfg, Mapping):
        if "name" not in cfg:
            raise ValueError(f"loss config needs a 'name', one of {', '.join(LOSS_NAMES)}")
        cfg = parse_loss_config(**cfg)
    if not isinstance(cfg, CONFIG_CLASSES):
        raise ValueError(f"not a loss config: {cfg!r}")
    return functools.partial(LOSS_FUNCTIONS[cfg.name], cfg=cfg)
