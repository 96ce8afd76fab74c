"""Atomic, checksummed checkpoints: model or adapter, optimizer, RNG states, round counter.

A checkpoint is written into a hidden temp dir beside its final place and renamed into
`round-NNNNNNNN/` only when complete (rename is atomic on POSIX), so a `kill -9` at any moment
leaves either the previous checkpoints or the new complete one — never a half-written one.
Leftover temp dirs from a killed writer are removed at start-up.

Disks and copies still corrupt files after the fact, so every file's sha256 goes into
`manifest.json`, written last. Resume verifies the newest checkpoint against its manifest and
reads all of it into memory before touching the model; a checkpoint that fails (a truncated,
flipped, missing or extra-broken file, an unreadable state.json or manifest, weights that do
not fit the model) is reported in one line and the previous one is tried. When none is usable,
`CheckpointError` says so and nothing is loaded: a node never silently starts over a run.
Checkpoints written before manifests existed (state.json without `format`) load unverified.

Layout of one checkpoint:
  model/        full fine-tuning: a plain HF model dir (config + safetensors + tokenizer)
  adapter/      LoRA: standard peft adapter files (PeftModel.from_pretrained loads them; its
                base_model_name_or_path is the base model's local dir) and the tokenizer
  optimizer.pt  optimizer state_dict (torch.save, local file only — never sent to peers)
  state.json    format, round, policy_version, python/torch RNG states, extra node state
  manifest.json {"format": 2, "files": {relative path: sha256 hex}} of every other file
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

log = logging.getLogger(__name__)

PREFIX = "round-"
MANIFEST = "manifest.json"
FORMAT = 2  # 2: manifest.json with a sha256 per file


class CheckpointError(RuntimeError):
    """No usable checkpoint where one was expected (message: one line naming each failure)."""


class CorruptCheckpoint(ValueError):
    """One checkpoint failed verification or loading; the message says what, in one line."""


@dataclass
class Restored:
    round: int  # the last completed round
    policy_version: int
    extra: dict[str, Any]
    name: str = ""  # the checkpoint's directory name


def _is_peft(model) -> bool:
    return hasattr(model, "peft_config")


def save(ckpt_dir: Path, *, model, tokenizer, optimizer, round_: int, policy_version: int,
         extra: dict[str, Any] | None = None, keep: int = 2) -> Path:
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    final = ckpt_dir / f"{PREFIX}{round_:08d}"
    tmp = ckpt_dir / f".tmp-{round_:08d}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    if _is_peft(model):
        model.save_pretrained(tmp / "adapter")
        tokenizer.save_pretrained(tmp / "adapter")
    else:
        model.save_pretrained(tmp / "model")
        tokenizer.save_pretrained(tmp / "model")
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    state = {
        "format": FORMAT,
        "round": round_,
        "policy_version": policy_version,
        "python_rng": to_jsonable(random.getstate()),
        "torch_rng": torch.get_rng_state().tolist(),
        "extra": extra or {},
    }
    (tmp / "state.json").write_text(json.dumps(state))
    files = {rel: _sha256(tmp / rel) for rel in _files(tmp)}
    (tmp / MANIFEST).write_text(json.dumps({"format": FORMAT, "files": files}, sort_keys=True))
    _fsync_tree(tmp)
    if final.exists():  # re-running a round after a resume: replace it atomically-enough
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(ckpt_dir)
    for old in checkpoint_dirs(ckpt_dir)[:-keep]:
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return final


def checkpoint_dirs(ckpt_dir: Path) -> list[Path]:
    """Every `round-*` dir, oldest first (each was complete when renamed into place)."""
    if not ckpt_dir.is_dir():
        return []
    return sorted((p for p in ckpt_dir.iterdir() if p.name.startswith(PREFIX) and p.is_dir()),
                  key=lambda p: p.name)


def complete_checkpoints(ckpt_dir: Path) -> list[Path]:
    """Checkpoint dirs holding a state.json, oldest first (content not verified: see `verify`)."""
    return [p for p in checkpoint_dirs(ckpt_dir) if (p / "state.json").is_file()]


def clean_partial(ckpt_dir: Path) -> int:
    """Remove temp dirs a killed writer left behind; returns how many."""
    if not ckpt_dir.is_dir():
        return 0
    leftovers = [p for p in ckpt_dir.iterdir() if p.name.startswith(".tmp-")]
    for p in leftovers:
        shutil.rmtree(p, ignore_errors=True)
    return len(leftovers)


def verify(path: Path) -> dict[str, Any]:
    """The checkpoint's state.json after checking every file against the manifest (CorruptCheckpoint)."""
    try:
        state = json.loads((path / "state.json").read_text())
        if not isinstance(state, dict):
            raise CorruptCheckpoint("state.json is not an object")
        if state.get("format") is None and not (path / MANIFEST).exists():
            log.warning("checkpoint %s has no manifest (an older format): loading it unverified", path.name)
            return state
        manifest = json.loads((path / MANIFEST).read_text())
        files = manifest["files"]
        if not isinstance(files, dict) or "state.json" not in files:
            raise CorruptCheckpoint("manifest.json lists no files")
    except CorruptCheckpoint:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CorruptCheckpoint(f"unreadable state.json or manifest.json ({type(exc).__name__}: {exc})"[:300]) from None
    for rel, digest in sorted(files.items()):
        f = path / rel
        if not f.is_file():
            raise CorruptCheckpoint(f"{rel} is missing")
        if _sha256(f) != digest:
            raise CorruptCheckpoint(f"{rel} does not match its sha256 in the manifest")
    return state


def restore(ckpt_dir: Path, *, model, optimizer) -> Restored | None:
    """Load the newest usable checkpoint into `model` and `optimizer`; None if there is none.

    A corrupt checkpoint is reported (log warning) and the previous one tried; CheckpointError
    when checkpoints exist but none is usable.
    """
    clean_partial(ckpt_dir)
    found = checkpoint_dirs(ckpt_dir)
    failures = []
    for path in reversed(found):
        try:
            state, weights, opt_state = _read(path, model)
            _apply(model, optimizer, state, weights, opt_state)
        except CorruptCheckpoint as exc:
            failures.append(f"{path.name}: {exc}")
            log.warning("checkpoint %s is unusable (%s); trying the previous one", path, exc)
            continue
        if failures:
            log.warning("resumed from %s, the newest usable checkpoint", path.name)
        return Restored(state["round"], state["policy_version"], state.get("extra", {}), path.name)
    if failures:
        raise CheckpointError(f"no usable checkpoint in {ckpt_dir} ({'; '.join(failures)}); move the directory "
                              "away or set checkpoint.resume=false to start fresh")
    return None


def _read(path: Path, model) -> tuple[dict[str, Any], dict[str, torch.Tensor], dict[str, Any]]:
    """Everything a checkpoint holds, verified and in memory; nothing applied yet."""
    state = verify(path)
    try:
        if not all(isinstance(state.get(k), int) for k in ("round", "policy_version")):
            raise KeyError("round or policy_version")
        state["python_rng"] = from_jsonable(state["python_rng"])
        state["torch_rng"] = torch.tensor(state["torch_rng"], dtype=torch.uint8)
        weights: dict[str, torch.Tensor] = {}
        if _is_peft(model):
            weights = load_file(path / "adapter" / "adapter_model.safetensors")
        else:
            files = sorted((path / "model").glob("*.safetensors"))
            if not files:
                raise FileNotFoundError("model/*.safetensors")
            for f in files:
                weights.update(load_file(f))
        opt_state = torch.load(path / "optimizer.pt", weights_only=True, map_location="cpu")  # a GPU checkpoint resumes
        # on a CPU machine; load_state_dict moves each tensor to its parameter's device
    except Exception as exc:  # safetensors, pickle, zip and key errors: all mean the same here
        raise CorruptCheckpoint(f"cannot read it ({type(exc).__name__}: {exc})"[:300]) from None
    return state, weights, opt_state


def _apply(model, optimizer, state: dict[str, Any], weights: dict[str, torch.Tensor],
           opt_state: dict[str, Any]) -> None:
    try:
        if _is_peft(model):
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(model, weights)
        else:
            own = model.state_dict()
            wrong = [k for k, v in weights.items() if k not in own or own[k].shape != v.shape]
            missing = [k for k in own if k not in weights and "lm_head" not in k]
            if wrong or missing:
                raise CorruptCheckpoint(f"its weights do not fit this model: {(wrong + missing)[:5]}")
            model.load_state_dict(weights, strict=False)
            model.tie_weights()
        optimizer.load_state_dict(opt_state)
        random.setstate(state["python_rng"])
        torch.set_rng_state(state["torch_rng"])
    except CorruptCheckpoint:
        raise
    except Exception as exc:
        raise CorruptCheckpoint(f"cannot load it ({type(exc).__name__}: {exc})"[:300]) from None


def to_jsonable(state):
    """A python RNG state (nested tuples) as JSON lists."""
    return [to_jsonable(v) for v in state] if isinstance(state, tuple) else state


def from_jsonable(state):
    return tuple(from_jsonable(v) for v in state) if isinstance(state, list) else state


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _fsync_tree(root: Path) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                os.fsync(f.fileno())
        _fsync_dir(Path(dirpath))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
