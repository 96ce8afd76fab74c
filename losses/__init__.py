"""Pure loss functions for the GRPO family: one module per family, one config class per loss.

    fn = build_loss("f-tis", g=5, reduction="mean")      # or build_loss_from_config(LossConfig)
    out = fn(LossInputs(...))                             # LossOutputs(loss, metrics)

Names: grpo, pg (losses.grpo); nois, vis, tis, f-nois, f-vis, f-tis (losses.fis); gspo
(losses.gspo); gepo (losses.gepo); `module:function` names a loss of your own (losses.custom).
The config classes and the `LossConfig` union live in losses.config, which needs no torch (a node validates its YAML without importing it); the
functions, the shared inputs, the tokenizer-agnostic behaviour view and the metrics live in
losses.base and the family modules, and are imported here on first use. losses.registry maps names to
(config class, function) and builds them; losses.plugin resolves the user's own objects by import path;
losses.compose holds a node's loss as one object, `Loss`: a base loss, the terms added to it and the filters of
its inputs, with one `needs_reference`; its parts are losses.imitation's term (`train.imitate`), losses.peer_floor's
filter (`train.peer_token_floor`) and losses.distill's term (on-policy distillation: a teacher's per-token reverse
KL added to the reward advantage, bounded).
"""

from __future__ import annotations

import importlib
from typing import Any

from losses.config import (
    LOSS_NAMES,
    CustomLossConfig,
    FISConfig,
    GEPOConfig,
    GRPOConfig,
    GSPOConfig,
    LossConfig,
    PGConfig,
    parse_loss_config,
)

_LAZY = {  # name → module: these need torch, so they load when first asked for
    "LOG_RATIO_BOUND": "losses.base",
    "BehaviourView": "losses.base",
    "LossInputs": "losses.base",
    "LossOutputs": "losses.base",
    "behaviour_view": "losses.base",
    "LossFn": "losses.registry",
    "build_loss": "losses.registry",
    "build_loss_from_config": "losses.registry",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'losses' has no attribute {name!r}")


__all__ = [
    "LOSS_NAMES",
    "CustomLossConfig",
    "FISConfig",
    "GEPOConfig",
    "GRPOConfig",
    "GSPOConfig",
    "LossConfig",
    "PGConfig",
    "parse_loss_config",
    *_LAZY,
]
