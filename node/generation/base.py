"""What the round needs from a generation backend, and the backend registry.

Convention (docs/ARCHITECTURE.md, docs/PROTOCOL.md §2): every completion token carries
log μ(y_t | x, y_<t) under the distribution actually sampled from, `log_softmax(logits / T)`,
computed from the raw logits. The scorer (node.round.logprobs) applies the same temperature, so
an on-policy completion's ratio π_θ/μ is 1 up to float error (tested to ≤ 1e-4).

Backends: `hf` (node.generation.hf, the project's decode loop on the training model), `hf-generate`
(node.generation.hf_generate, transformers `generate`: the reference) and `vllm`
(node.generation.vllm). `auto` picks one at start (`choose_backend`).
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from node.generation.config import GenerationConfig
from protocols.records import Completion

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


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

    # how the decode steps run and why ("graphs", "eager: no CUDA", "eager: capture failed: …", "vllm: …"): the
    # node's first line and every metrics line carry it (node.generation.decode.DecodeLoop.mode)
    decode_mode: str


BACKENDS = {  # generation.backend → "module:class"; vLLM is an optional extra, imported only when chosen
    "hf": "node.generation.hf:HFGenerator",
    "hf-generate": "node.generation.hf_generate:HFGenerateGenerator",
    "vllm": "node.generation.vllm:VLLMGenerator",
}


def generate_in_batches(generate_batch: Callable[[list[str], int], list[list[Completion]]], prompts: list[str],
                        n: int, max_batch_sequences: int, progress=None) -> GenerationResult:
    """`n` completions of each prompt, `max_batch_sequences // n` prompts (at least one) per `generate_batch`
    call; `progress` (a node.books.progress.Progress over prompts), when given, advances after each batch."""
    start = time.perf_counter()
    per_call = max(1, max_batch_sequences // n)
    groups: list[list[Completion]] = []
    for lo in range(0, len(prompts), per_call):
        batch = generate_batch(prompts[lo : lo + per_call], n)
        groups.extend(batch)
        if progress is not None:
            progress.advance(len(batch))
    new_tokens = sum(len(c.token_ids) for g in groups for c in g)
    return GenerationResult(groups, time.perf_counter() - start, new_tokens)


def trimmed_completion(tokenizer, ids: list[int], logprobs: list[float]) -> Completion:
    """A sampled row cut after its first EOS (kept: stopping is an action that gets trained)."""
    eos = tokenizer.eos_token_id
    end = ids.index(eos) + 1 if eos in ids else len(ids)
    return Completion(
        text=tokenizer.decode(ids[:end], skip_special_tokens=True),
        token_ids=tuple(ids[:end]),
        logprobs=tuple(logprobs[:end]),
        finish_reason="stop" if eos in ids else "length",
    )


def choose_backend(cfg: GenerationConfig, device: torch.device) -> tuple[str, str]:
    """(backend, why) for `generation.backend`; `auto` → vLLM when it imports and the policy is on a
    GPU (and top_p = 1, which vLLM's logprobs need), else the `hf` decode loop."""
    if cfg.backend != "auto":
        return cfg.backend, "as configured"
    if device.type != "cuda":
        return "hf", f"the policy is on {device}, not a GPU"
    if cfg.top_p < 1.0:
        return "hf", f"top_p = {cfg.top_p:g} (vLLM's logprobs need top_p = 1)"
    try:
        import vllm  # noqa: F401 — the optional extra `.[vllm]`
    except Exception as exc:  # noqa: BLE001 — a broken install counts as absent, with its reason
        return "hf", f"vllm does not import ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    return "vllm", f"vllm {vllm.__version__} imports and the policy is on {device}"


def build_generator(cfg: GenerationConfig, model, tokenizer) -> Generator:
    """The backend named by `cfg.backend` (resolved by `choose_backend` when `auto`), built on the
    training model and tokenizer; its `choice` attribute is the one line saying which and why."""
    device = next(model.parameters()).device
    name, why = choose_backend(cfg, device)
    if name != cfg.backend:
        cfg = cfg.model_copy(update={"backend": name})
    module, cls = BACKENDS[name].split(":")
    gen = getattr(importlib.import_module(module), cls)(model, tokenizer, cfg)
    detail = getattr(gen, "describe", lambda: "")()
    gen.choice = f"generation backend {name} ({why})" + (f" · {detail}" if detail else "")
    log.info("%s", gen.choice)
    return gen
