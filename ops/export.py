"""`swarm export RUN_DIR --out DIR [--merge]`: a run's newest checkpoint as a folder transformers or peft loads.

  full fine-tuning  OUT = the checkpoint's model/ (config.json, safetensors, tokenizer):
                    `AutoModelForCausalLM.from_pretrained(OUT)`
  LoRA              OUT = the adapter (adapter_config.json, adapter weights, tokenizer) with
                    `base_model_name_or_path` set to the base model's local directory (a built-in
                    alias resolves to its cache dir): `PeftModel.from_pretrained(base, OUT)` or
                    `AutoPeftModelForCausalLM.from_pretrained(OUT)`
  LoRA --merge      OUT = a full model, the adapter merged into the base weights (float32):
                    `AutoModelForCausalLM.from_pretrained(OUT)`

OUT also gets `rlswarm-export.json` (run, round, policy version, kind, base model). The folder is
written beside OUT and renamed into place when complete; an existing non-empty OUT is refused.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from node.books import checkpoint

MANIFEST = "rlswarm-export.json"


class ExportError(ValueError):
    """A run dir or output that cannot be exported (one line for the user)."""


def newest_checkpoint(run_dir: Path) -> Path:
    found = checkpoint.complete_checkpoints(run_dir / "checkpoints")
    if found:
        return found[-1]
    nodes = sorted({p.parents[2] for p in run_dir.glob("*/checkpoints/round-*/state.json")})
    if nodes:
        raise ExportError(f"{run_dir} holds several nodes' runs; export one of: {' '.join(map(str, nodes))}")
    raise ExportError(f"no checkpoint in {run_dir / 'checkpoints'} (a node writes one every checkpoint.every rounds)")


def base_model_dir(ckpt: Path) -> Path:
    """The LoRA base model's local dir: as peft recorded it, else the run's model spec resolved again."""
    recorded = json.loads((ckpt / "adapter" / "adapter_config.json").read_text()).get("base_model_name_or_path")
    if recorded and (Path(recorded) / "config.json").is_file():
        return Path(recorded).resolve()
    spec = json.loads((ckpt / "state.json").read_text()).get("extra", {}).get("model_spec") or recorded
    if not spec:
        raise ExportError(f"{ckpt}: the adapter names no base model")
    from node.models.load import resolve_model_dir

    return resolve_model_dir(spec).resolve()


def export(run_dir: Path, out: Path, *, merge: bool = False) -> dict[str, Any]:
    """Write the newest checkpoint of `run_dir` to `out`; returns the manifest."""
    run_dir, out = Path(run_dir), Path(out)
    if not run_dir.is_dir():
        raise ExportError(f"no run directory {run_dir}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out} exists and is not empty")
    ckpt = newest_checkpoint(run_dir)
    state = json.loads((ckpt / "state.json").read_text())
    tmp = out.parent / f".tmp-export-{out.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {"run": str(run_dir.resolve()), "checkpoint": ckpt.name, "round": state["round"],
                                "policy_version": state["policy_version"], "base_model": None}
    try:
        if (ckpt / "model").is_dir():
            shutil.copytree(ckpt / "model", tmp)
            manifest["kind"] = "full"
        else:
            base = base_model_dir(ckpt)
            manifest["base_model"] = str(base)
            if merge:
                _merge(ckpt / "adapter", base, tmp)
                manifest["kind"] = "merged"
            else:
                _adapter(ckpt / "adapter", base, tmp)
                manifest["kind"] = "adapter"
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        if out.exists():
            out.rmdir()  # empty (checked above)
        os.rename(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return manifest


def _adapter(adapter: Path, base: Path, dest: Path) -> None:
    shutil.copytree(adapter, dest)
    cfg_path = dest / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["base_model_name_or_path"] = str(base)
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    if not (dest / "tokenizer_config.json").is_file():  # checkpoints written before the tokenizer was saved
        _tokenizer(adapter, base).save_pretrained(dest)


def _merge(adapter: Path, base: Path, dest: Path) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, local_files_only=True)
    merged = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    merged.save_pretrained(dest)
    _tokenizer(adapter, base).save_pretrained(dest)


def _tokenizer(adapter: Path, base: Path):
    from transformers import AutoTokenizer

    source = adapter if (adapter / "tokenizer_config.json").is_file() else base
    return AutoTokenizer.from_pretrained(source, local_files_only=True)
