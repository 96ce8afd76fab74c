"""What the round needs from a generation backend, and the backend registry.

Convention (docs/ARCHITECTURE.md, docs/PROTOCOL.md §2): every completion token carries
log μ(y_t | x, y_<t) under the distribution actually sampled from, `log_softmax(logits / T)`,
computed from the raw logits. The scorer (node.round.scoring) applies the same temperature, so
an on-policy completion's ratio π_θ/μ is 1 up to float error (tested to ≤ 1e-4).

Backends: `hf` (node.generation.hf, transformers `generate`) and `vllm` (node.generation.vllm).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from node.generation.config import GenerationConfig
from protocols.records import Completion

if TYPE_CHECKING:
    import torch


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

    def generate(self, prompts: list[str], n: int, progress=None) -> GenerationResult: ...

    def sync_weights(self, model: torch.nn.Module, policy_version: int, *, force: bool = False) -> None:
        """Called after every optimizer step (and with force=True after a checkpoint restore)."""
        ...


BACKENDS = {  # generation.backend → "module:class"; vLLM is an optional extra, imported only when chosen
    "hf": "node.generation.hf:HFGenerator",
    "vllm": "node.generation.vllm:VLLMGenerator",
}


def build_generator(cfg: GenerationConfig, model, tokenizer) -> Generator:
    """The backend named by `cfg.backend`, built on the training model and tokenizer."""
    module, cls = BACKENDS[cfg.backend].split(":")
    return getattr(importlib.import_module(module), cls)(model, tokenizer, cfg)
