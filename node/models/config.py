"""Which model a node runs (torch-free): its spec, dtype and optional LoRA adapter.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


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
    dtype: Literal["float32", "bfloat16"] = Field("float32", description="Weight dtype.")
    lora: LoraSpec | None = Field(None, description="LoRA adapter; null = full fine-tuning.")
