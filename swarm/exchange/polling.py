"""Which rollout keys one poll of the DHT reads (docs/PROTOCOL.md §5), and how often a crowded one is read.

Each tick (every `poll_interval_s`) reads the current window's shards; every PREVIOUS_EVERY-th tick
also the previous window's (late and skewed announcements), and so does the first tick of a new window,
so that what was stored after a window's last read is still seen; when ticks are far apart (the DHT
polls back off while gossip delivers: swarm.exchange.poller), every window that ended since the last
tick is read once, whatever the pacing below says (within `max_age_s`). After a start, the windows of
the last `max_age_s` are read once each, newest first, CATCH_UP_PER_TICK a tick. `read_shards` reads a
random subset of the shards.

A DHT read costs in proportion to the entries under the key, not to what we keep of them: the DHT
fetches every entry (from every replica of the key), verifies its signature and hands us at most
`max_entries_per_key`. A swarm's keys fill with its size (and identities are free, so with floods),
so a fixed read rate makes every reader's announcement download, and the requests that land on the
peers holding a key, grow with the number of peers. The plan therefore spends a bounded number of
entries per second: a shard whose key held n entries at its last read (this window's, or else the
previous window's key of that shard) is read at most every

    n × shards × (1 + 1 / PREVIOUS_EVERY) / entries_per_s   seconds
                                     (the previous window's key PREVIOUS_EVERY times less often),
    entries_per_s = READS_PER_FETCH × max_fetches_per_window / window_s

(12.8 entries per second with the defaults: 8 announcements looked at per bundle the fan-in budget can
fetch). A small swarm's keys (at most SMALL_KEY entries) are read every tick as before; a key of
N / shards entries is read by each reader about every 1.25 N / entries_per_s seconds, so the entries a
reader downloads per second and the reads per second each key holder serves (N readers × entries_per_s
/ N) stay the same whatever N is. Fresh announcements reach a receiver by the publishers' direct
pushes (§6.2), which no rule here delays; the DHT read is for discovery (newcomers, late joiners, peers
nobody pushes to). Catch-up reads are never skipped. So identities crowding one shard slow the reads of
that shard: a peer announcing there through the DHT alone is seen late and may lose bundles (a newer
announcement replaces its older one under its subkey), which is why publishers push (§6.2). Of the
entries a read returns, swarm.dht.entries.pick_entries keeps the peers in good standing first, then others at
random, backed-off peers last, so a crowd cannot push a peer we use out of the read itself.
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict

from protocols.keys import rollouts_key, window_of, windows_back
from swarm.config import SwarmConfig

PREVIOUS_EVERY = 4  # the previous window is re-read every 4th tick
CATCH_UP_PER_TICK = 2  # older windows read per tick after a start
READS_PER_FETCH = 8  # DHT entries read per second = this × the fan-in budget per second
SMALL_KEY = 4  # a key that held at most this many entries is read every tick (a small swarm's keys)


class PollPlan:
    """The keys of each tick (module docstring); `saw` records how many entries a key held when read."""

    def __init__(self, cfg: SwarmConfig, now: float, rng: random.Random | None = None):
        self.cfg = cfg
        self.rng = rng or random.Random()
        self.catch_up = windows_back(window_of(now, cfg.window_s), cfg.max_age_s, cfg.window_s)[2:]
        self._entries: OrderedDict[str, int] = OrderedDict()  # key → entries it held at its last read
        self._shard_of: dict[str, int] = {}  # key → its shard (keys handed out by `keys`)
        self._shard_entries: dict[int, int] = {}  # shard → entries its newest key held at its last read
        self._last: dict[tuple[bool, int], float] = {}  # (previous window?, shard) → when last read
        self.entries_per_s = READS_PER_FETCH * max(1, cfg.max_fetches_per_window) / cfg.window_s
        self._last_current: int | None = None  # the current window at the last tick
        self._max_missed = max(1, int(cfg.max_age_s // cfg.window_s))  # older windows hold nothing we would fetch

    def keys(self, tick: int, now: float) -> dict[str, tuple[int, int]]:
        """DHT key → (window, shard) to read at this tick."""
        cfg = self.cfg
        current = window_of(now, cfg.window_s)
        last, self._last_current = self._last_current, current
        new_window = last is not None and current > last
        recent = [current] + ([current - 1] if new_window or tick % PREVIOUS_EVERY == 0 else [])
        older, self.catch_up = self.catch_up[:CATCH_UP_PER_TICK], self.catch_up[CATCH_UP_PER_TICK:]
        if new_window:  # windows that ended with no tick after their end (reads backed off): each read once more
            older += [w for w in range(max(last, current - self._max_missed), current - 1) if w not in older]
        shards = list(range(cfg.shards))
        if cfg.read_shards is not None and cfg.read_shards < len(shards):
            shards = self.rng.sample(shards, cfg.read_shards)
        per_window = cfg.shards * (1 + 1 / PREVIOUS_EVERY)  # every shard has its own gate, read_shards or not
        keys = {}
        for w in recent + older:
            for s in shards:
                key = rollouts_key(cfg.swarm_id, w, s)
                if w in older or self._due(key, s, w != current, now, per_window):
                    keys[key] = (w, s)
                    self._shard_of[key] = s
        while len(self._shard_of) > 4 * cfg.shards + 64:
            self._shard_of.pop(next(iter(self._shard_of)))
        return keys

    def saw(self, key: str, entries: int) -> None:
        self._entries[key] = entries
        self._entries.move_to_end(key)
        if key in self._shard_of:
            self._shard_entries[self._shard_of[key]] = entries
        while len(self._entries) > 4 * self.cfg.shards + 64:
            self._entries.popitem(last=False)

    def _due(self, key: str, shard: int, previous: bool, now: float, per_window: float) -> bool:
        entries = self._entries.get(key, self._shard_entries.get(shard, 0))
        every = entries * per_window / self.entries_per_s * (PREVIOUS_EVERY if previous else 1)
        if entries <= SMALL_KEY or every <= self.cfg.poll_interval_s \
                or now - self._last.get((previous, shard), -math.inf) >= every:
            self._last[(previous, shard)] = now
            return True
        return False
