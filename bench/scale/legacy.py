"""The poll plan of swarm/exchange/polling.py as it was before reads were paced (commit 1214f87), kept verbatim for the "before" rows of
bench/scale/run.py: a key that held more than `max_entries_per_key` entries at its last read is read every
⌈entries / max_entries_per_key⌉-th tick, at most every MAX_STRIDE-th; a new window's key is read at once.
Nothing in the swarm uses it."""

from __future__ import annotations

import math
import random
from collections import OrderedDict

from protocols.keys import rollouts_key, window_of, windows_back
from swarm.config import SwarmConfig
from swarm.exchange.polling import CATCH_UP_PER_TICK, PREVIOUS_EVERY

MAX_STRIDE = 16  # a crowded key is still read at least every 16th tick (8 s at the default 0.5 s)


class StridePollPlan:
    """The keys of each tick (module docstring); `saw` records how many entries a key held when read."""

    def __init__(self, cfg: SwarmConfig, now: float, rng: random.Random | None = None):
        self.cfg = cfg
        self.rng = rng or random.Random()
        self.catch_up = windows_back(window_of(now, cfg.window_s), cfg.max_age_s, cfg.window_s)[2:]
        self._entries: OrderedDict[str, int] = OrderedDict()  # key → entries it held at its last read

    def keys(self, tick: int, now: float) -> dict[str, tuple[int, int]]:
        """DHT key → (window, shard) to read at this tick."""
        cfg = self.cfg
        current = window_of(now, cfg.window_s)
        recent = [current] + ([current - 1] if tick % PREVIOUS_EVERY == 0 else [])
        older, self.catch_up = self.catch_up[:CATCH_UP_PER_TICK], self.catch_up[CATCH_UP_PER_TICK:]
        shards = list(range(cfg.shards))
        if cfg.read_shards is not None and cfg.read_shards < len(shards):
            shards = self.rng.sample(shards, cfg.read_shards)
        keys = {}
        for w in recent + older:
            for s in shards:
                key = rollouts_key(cfg.swarm_id, w, s)
                if w in older or self._due(key, tick):
                    keys[key] = (w, s)
        return keys

    def saw(self, key: str, entries: int) -> None:
        self._entries[key] = entries
        self._entries.move_to_end(key)
        while len(self._entries) > 4 * self.cfg.shards + 64:
            self._entries.popitem(last=False)

    def _due(self, key: str, tick: int) -> bool:
        stride = min(MAX_STRIDE, math.ceil(self._entries.get(key, 0) / self.cfg.max_entries_per_key))
        return stride <= 1 or tick % stride == 0
