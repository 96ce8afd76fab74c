"""Pure loss functions for the GRPO family (DESIGN §9): one module and one config class per family.

    fn = build_loss("f-tis", g=5, reduction="mean")      # or build_loss_from_config(LossConfig)
    out = fn(LossInputs(...))                             # LossOutputs(loss, metrics)

Names: grpo, pg (losses.grpo); nois, vis, tis, f-nois, f-vis, f-tis (losses.fis); gspo
(losses.gspo); gepo (losses.gepo). Shared inputs, the tokenizer-agnostic behaviour view
(DESIGN §7) and the metrics live in losses.base. Imports torch and pydantic only.
"""

from losses.base import LOG_RATIO_BOUND, BehaviourView, LossInputs, LossOutputs, behaviour_view
from losses.fis import FISConfig
from losses.gepo import GEPOConfig
from losses.grpo import GRPOConfig, PGConfig
from losses.gspo import GSPOConfig
from losses.registry import (
    LOSS_NAMES,
    LossConfig,
    LossFn,
    build_loss,
    build_loss_from_config,
    parse_loss_config,
)

__all__ = [
    "LOG_RATIO_BOUND",
    "LOSS_NAMES",
    "BehaviourView",
    "FISConfig",
    "GEPOConfig",
    "GRPOConfig",
    "GSPOConfig",
    "LossConfig",
    "LossFn",
    "LossInputs",
    "LossOutputs",
    "PGConfig",
    "behaviour_view",
    "build_loss",
    "build_loss_from_config",
    "parse_loss_config",
]
