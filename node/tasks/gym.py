"""reasoning-gym datasets by (name, config, seed), built once and cached; the one place that builds them.

Procedural datasets generate items lazily, so `size` only bounds the index space. A dataset
is keyed by its canonical JSON config, so equal configs share one cached instance.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any

import reasoning_gym

INDEX_SPACE = 1 << 32  # valid item indexes: 0 .. INDEX_SPACE − 1 (one stream, node.tasks.streams)
MAX_CONFIG_DEPTH = 8  # nesting of a dataset config (reasoning-gym's are flat or one level deep)
MAX_CONFIG_ITEMS = 4096  # values in a dataset config, all levels together
_SCALARS = (str, int, float, bool, type(None))


def check_config(config: Any) -> None:
    """Raise ValueError unless `config` is a plain JSON object: str keys, JSON values, bounded size.

    Run on a peer's config before anything serialises it: a binary value, a non-finite float or
    ~1000 levels of nesting would otherwise make `json.dumps` raise (TypeError, ValueError,
    RecursionError). Iterative, so the check itself cannot overflow the stack.
    """
    if not isinstance(config, dict):
        raise ValueError("dataset config is not a map")
    stack, items = [(config, 1)], 0
    while stack:
        value, depth = stack.pop()
        items += 1
        if items > MAX_CONFIG_ITEMS:
            raise ValueError(f"dataset config holds more than {MAX_CONFIG_ITEMS} values")
        if isinstance(value, dict):
            if depth > MAX_CONFIG_DEPTH:
                raise ValueError(f"dataset config nests deeper than {MAX_CONFIG_DEPTH}")
            if not all(isinstance(k, str) for k in value):
                raise ValueError("dataset config has a non-string key")
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            if depth > MAX_CONFIG_DEPTH:
                raise ValueError(f"dataset config nests deeper than {MAX_CONFIG_DEPTH}")
            stack.extend((v, depth + 1) for v in value)
        elif not isinstance(value, _SCALARS):
            raise ValueError(f"dataset config holds a {type(value).__name__} value")
        elif isinstance(value, float) and not math.isfinite(value):
            raise ValueError("dataset config holds a non-finite number")


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
