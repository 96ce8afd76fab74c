"""What a bench needs from the node's models: whether one is cached, each lab model's own task, torch threads.

Importing this sets HF_HUB_OFFLINE and TOKENIZERS_PARALLELISM (unless already set): a bench never downloads
and never lets tokenizers fork threads under it.
"""

from __future__ import annotations

import os

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
