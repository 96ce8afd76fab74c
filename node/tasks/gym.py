"""reasoning-gym datasets by (name, config, seed), built once and cached; the one place that builds them.

Procedural datasets generate items lazily, so `size` only bounds the index space. A dataset
is keyed by its canonical JSON config, so equal configs share one cached instance.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import reasoning_gym

INDEX_SPACE = 1 << 32  # valid item indexes: 0 .. INDEX_SPACE − 1 (one stream, node.tasks.streams)


def config_key(config: dict[str, Any]) -> str:
    """Canonical JSON of a dataset config (sorted keys): part of a task's identity."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def build_dataset(name: str, config: dict[str, Any], seed: int):
    """The reasoning-gym dataset (cached); raises the dataset's own error on a bad config."""
    return _dataset(name, config_key(config), seed)


def dataset_names() -> set[str]:
    return set(reasoning_gym.factory.DATASETS)


@functools.lru_cache(maxsize=256)
def _dataset(name: str, key: str, seed: int):
    return reasoning_gym.create_dataset(name, seed=seed, size=INDEX_SPACE, **json.loads(key))
