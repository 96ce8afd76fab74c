"""Atomic checkpoints: model or adapter, optimizer, RNG states, round counter.

A checkpoint is written into a hidden temp dir beside its final place and renamed into
`round-NNNNNNNN/` only when complete (rename is atomic on POSIX), so a `kill -9` at any moment
leaves either the previous checkpoints or the new complete one — never a half-written one.
Leftover temp dirs from a killed writer are removed at start-up. Resume picks the newest
complete `round-*` dir.

Layout of one checkpoint:
  model/      full fine-tuning: a plain HF model dir (config + safetensors + tokenizer)
  adapter/    LoRA: standard peft adapter files (PeftModel.from_pretrained loads them; its
              base_model_name_or_path is the base model's local dir) and the tokenizer
  optimizer.pt  optimizer state_dict (torch.save, local file only — never sent to peers)
  state.json  round, policy_version, python/torch RNG states, extra node state
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

PREFIX = "round-"


@dataclass
class Restored:
    round: int  # the last completed round
    policy_version: int
    extra: dict[str, Any]


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
        "round": round_,
        "policy_version": policy_version,
        "python_rng": to_jsonable(random.getstate()),
        "torch_rng": torch.get_rng_state().tolist(),
        "extra": extra or {},
    }
    (tmp / "state.json").write_text(json.dumps(state))
    _fsync_tree(tmp)
    if final.exists():  # re-running a round after a resume: replace it atomically-enough
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(ckpt_dir)
    for old in complete_checkpoints(ckpt_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def complete_checkpoints(ckpt_dir: Path) -> list[Path]:
    if not ckpt_dir.is_dir():
        return []
    done = [p for p in ckpt_dir.iterdir() if p.name.startswith(PREFIX) and (p / "state.json").is_file()]
    return sorted(done, key=lambda p: p.name)


def clean_partial(ckpt_dir: Path) -> int:
    """Remove temp dirs a killed writer left behind; returns how many."""
    if not ckpt_dir.is_dir():
        return 0
    leftovers = [p for p in ckpt_dir.iterdir() if p.name.startswith(".tmp-")]
    for p in leftovers:
        shutil.rmtree(p, ignore_errors=True)
    return len(leftovers)


def restore(ckpt_dir: Path, *, model, optimizer) -> Restored | None:
    """Load the newest complete checkpoint into `model` and `optimizer`; None if there is none."""
    clean_partial(ckpt_dir)
    found = complete_checkpoints(ckpt_dir)
    if not found:
        return None
    path = found[-1]
    if _is_peft(model):
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, load_file(path / "adapter" / "adapter_model.safetensors"))
    else:
        weights = {}
        for f in sorted((path / "model").glob("*.safetensors")):
            weights.update(load_file(f))
        missing, unexpected = model.load_state_dict(weights, strict=False)
        bad = [k for k in missing if "lm_head" not in k] + list(unexpected)
        if bad:
            raise RuntimeError(f"checkpoint {path} does not match the model: {bad[:5]}")
        model.tie_weights()
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
    state = json.loads((path / "state.json").read_text())
    random.setstate(from_jsonable(state["python_rng"]))
    torch.set_rng_state(torch.tensor(state["torch_rng"], dtype=torch.uint8))
    return Restored(state["round"], state["policy_version"], state.get("extra", {}))


def to_jsonable(state):
    """A python RNG state (nested tuples) as JSON lists."""
    return [to_jsonable(v) for v in state] if isinstance(state, tuple) else state


def from_jsonable(state):
    return tuple(from_jsonable(v) for v in state) if isinstance(state, list) else state


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
