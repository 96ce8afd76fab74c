"""Which model a node runs (torch-free): its spec, dtype and optional LoRA adapter, and where and in
which precision it is trained (`PlacementConfig`, the `train.device` / `train.autocast` /
`train.gradient_checkpointing` fields; node/models/device.py applies them).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

DEVICE_PATTERN = r"^(auto|cpu|cuda(:[0-9]{1,2})?)$"


class LoraSpec(BaseModel):
    """LoRA adapter (Hu et al. 2021): W' = W + (alpha / r) · B A, with B initialised to zero."""

    model_config = ConfigDict(extra="forbid")
    r: int = Field(8, ge=1, le=1024, description="Adapter rank r.")
    alpha: int = Field(16, ge=1, le=65536, description="Scale numerator: the update is scaled by alpha / r.")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on the adapter input.")
    target_modules: list[str] | str = Field(
        "all-linear",
        description="Module names to adapt, or 'all-linear' (every linear layer but the output head).",
    )
    init_seed: int = Field(
        0,
        ge=0,
        le=2**31 - 1,
        description="Seed of the adapter init; equal seeds give every node the same A (needed "
        "when federated nodes average adapters).",
    )

class ModelConfig(BaseModel):
    """Which policy model a node runs, in which precision, and whether it is LoRA-tuned."""

    model_config = ConfigDict(extra="forbid")
    spec: str = Field(min_length=1, description="HF hub id (org/name), local directory, or built-in alias.")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="Weight dtype (of the frozen base under LoRA, whose adapter peft keeps in "
        "float32). float16 only with LoRA: AdamW updates of float16 weights underflow; for float16 math "
        "with float32 weights use train.autocast: float16. bfloat16 full fine-tuning loses most updates at a "
        "small train.lr: AdamW moves a weight by about lr a step, and a bfloat16 weight w changes only when "
        "that exceeds abs(w)·2^-9 (at lr 1e-5 no weight above 0.005 moves; the node warns at lr ≤ 1e-5); "
        "keep float32 weights with train.autocast: bfloat16 there.")
    lora: LoraSpec | None = Field(None, description="LoRA adapter; null = full fine-tuning.")

    @model_validator(mode="after")
    def _float16_needs_lora(self) -> ModelConfig:
        if self.dtype == "float16" and self.lora is None:
            raise ValueError("model.dtype float16 needs model.lora (full fine-tuning of float16 weights loses "
                             "AdamW's small updates); use bfloat16, or float32 with train.autocast: float16")
        return self


class PlacementConfig(BaseModel):
    """Where the policy is trained and scored, and in which precision (the `train.*` fields below)."""

    model_config = ConfigDict(extra="forbid")
    device: str = Field(
        "auto", description="Training, scoring and (hf backend) generation device: auto (the first CUDA GPU "
        "when torch sees one, else cpu), cpu, cuda or cuda:N. Asking for cuda where torch sees none stops the node with "
        "one line. The vllm backend's engine takes the first visible GPU itself: cuda:1 trains beside it.")
    autocast: Literal["bfloat16", "float16"] | None = Field(
        None, description="Mixed precision: forward passes (generation, scoring, training) run under "
        "torch.autocast in this dtype while weights and optimizer state stay in model.dtype; float16 adds a "
        "dynamic loss scale (a step whose gradients overflow is skipped). null = model.dtype throughout.")
    gradient_checkpointing: bool | Literal["auto"] = Field(
        False, description="Recompute activations in the backward pass: less memory for long completions, "
        "about a third more compute per training step. auto: measured once at start (node/round/sizing.py) — on "
        "only when the micro-batch would not fit in the training device's free memory without it.")

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not re.fullmatch(DEVICE_PATTERN, v):
            raise ValueError(f"{v!r} is not a device: auto, cpu, cuda or cuda:N")
        return v
