"""What a bench needs from the node's models: whether one is cached, each lab model's own task, torch threads,
and the build a run measured (`build_of`: the weights' hash and the packages that made and ran them).

Importing this sets HF_HUB_OFFLINE and TOKENIZERS_PARALLELISM (unless already set): a bench never downloads
and never lets tokenizers fork threads under it.
"""

from __future__ import annotations

import hashlib
import os
from functools import cache
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from node.models.load import default_cache_dir  # noqa: E402
from node.tasks.config import DatasetSpec, TaskConfig  # noqa: E402
from node.tasks.source import TaskSource  # noqa: E402

# The lab model's own task (node/models/lab.py recipe): easy two-term sums.
CHAIN_SUM = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}
# lab-spell's own task (its recipe): reverse a 3–6 letter word.
SPELL = {"min_word_len": 3, "max_word_len": 6}


def model_cached(alias: str) -> bool:
    """True when a built-in alias is already in the cache (so a bench run never triggers a build)."""
    models = default_cache_dir() / "models"
    return any(p.is_dir() and p.name.startswith(f"{alias}-v") for p in models.glob(f"{alias}-v*"))


def cached_models(specs: list[str]) -> tuple[list[str], list[str]]:
    """The specs already in the cache, and the ones skipped (each said in one line): a bench run never builds."""
    found, skipped = [], []
    for spec in specs:
        if model_cached(spec):
            found.append(spec)
        else:
            skipped.append(spec)
            print(f"[skip] {spec}: not in the built-in cache (swarm models fetch {spec})")
    return found, skipped


def system_prompt_for(spec: str) -> str | None:
    """lab-* models were warm-started without a system prompt; real LMs get reasoning-gym's default."""
    return None if spec.startswith("lab-") or spec.startswith("tiny-") else "default"


def task_source(spec: str, seed: int = 0) -> TaskSource:
    """The model's own task: spell_backward for lab-spell, easy chain_sum otherwise."""
    data = DatasetSpec(name="spell_backward", config=SPELL) if spec == "lab-spell" else \
        DatasetSpec(name="chain_sum", config=CHAIN_SUM)
    return TaskSource(TaskConfig(datasets=[data], seed=seed, system_prompt=system_prompt_for(spec), eval_size=0))


def set_threads(n: int) -> None:
    torch.set_num_threads(n)


@cache
def build_of(spec: str) -> dict:
    """What a run on model `spec` measured: the sha256 (first 16 hex) of its weight files in its cache folder (a
    built-in is rebuilt on every machine, and its build depends on the installed packages: docs/BENCHMARKS.md) and
    the torch and transformers that ran it. Two runs to be paired must name the same build."""
    import transformers

    from node.models.load import resolve_model_dir

    folder = resolve_model_dir(spec)
    digest = hashlib.sha256()
    for path in sorted(Path(folder).glob("*.safetensors")) or sorted(Path(folder).glob("*.bin")):
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                digest.update(chunk)
    return {"model": spec, "weights": digest.hexdigest()[:16], "torch": torch.__version__,
            "transformers": transformers.__version__}


def mixed_build(runs: list[dict], build: dict) -> tuple[str | None, str | None]:
    """(refusal, warning) for resuming `runs` (a resumable bench's earlier runs) on `build`: a refusal when one of
    the same model names other weights (it measured another model: not paired), a warning when only the packages
    differ (the same model, run by other numerics: paired, but no longer reproduced to the last digit)."""
    builds = [r["build"] for r in runs if r.get("build") and r["build"]["model"] == build["model"]]
    other = next((b for b in builds if b["weights"] != build["weights"]), None)
    if other is not None:
        return (f"the runs file holds runs on another build ({_said(other)}) than this machine's ({_said(build)}): "
                "runs of two builds are not paired; rerun them under another --tag, or resume where they ran"), None
    other = next((b for b in builds if b != build), None)
    if other is not None:
        return None, (f"earlier runs ran the same weights with other packages ({_said(other)}; here {_said(build)}): "
                      "paired, but a rerun here will not reproduce them to the last digit")
    return None, None


def unmatched_before(runs: list[dict]) -> list[str]:
    """A line for each seed whose runs began from different untrained scores (`before`): they measured different
    builds (runs made before `build` was recorded are told apart only this way)."""
    firsts: dict = {}
    lines = []
    for r in runs:
        key = (r.get("nodes"), r.get("seed"), r.get("rounds"), r.get("twin"), r.get("special", r.get("arm") == "E"))
        first = firsts.setdefault(key, r)
        if r.get("before") != first.get("before"):
            lines.append(f"seed {r['seed']}: {r['arm']} began from {r.get('before')}, {first['arm']} from "
                         f"{first.get('before')}: different builds, not paired")
    return lines


def _said(build: dict) -> str:
    return f"{build['model']} weights {build['weights']}, torch {build['torch']}, transformers {build['transformers']}"
