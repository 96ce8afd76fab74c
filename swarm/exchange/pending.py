"""Decoded records waiting for the node's next round, bounded in bytes and shared fairly among peers.

A fetched bundle is decoded as soon as it arrives (swarm.exchange.inbox), but the node takes its records only
at its next round — 0.1 s later on a lab model, 30 s or more on a real one. Bytes on the wire do not
bound what records become once decoded (docs/PROTOCOL.md §3), so what waits here is bounded by an
estimate of its decoded size (swarm.exchange.receive.decoded_bytes), not by a count of bundles: at most
`max_bytes` in all. When a new bundle would pass the bound, the peer holding the most bytes loses
its oldest waiting bundle, again until it fits (the new bundle itself, if its own peer holds the
most): one peer that sends large bundles fast displaces only its own, never another peer's share.
Records so displaced are counted as `inbox_full` (records) and judge nobody: the bound is the
receiver's own choice. Not thread-safe: swarm.exchange.inbox.Inbox calls it under its lock.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass

from protocols.records import RolloutRecord


@dataclass
class Waiting:
    peer: str
    records: list[RolloutRecord]
    nbytes: int  # estimated decoded size (swarm.exchange.receive.decoded_bytes)


class Pending:
    """The bundles delivered since the node's last take, oldest first, within `max_bytes` (module docstring)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._queue: deque[Waiting] = deque()
        self._by_peer: Counter = Counter()  # peer → estimated bytes waiting
        self.total = 0

    def add(self, peer: str, records: list[RolloutRecord], nbytes: int) -> int:
        """File one bundle's records; returns how many waiting records were displaced to stay within max_bytes."""
        self._queue.append(Waiting(peer, records, nbytes))
        self._by_peer[peer] += nbytes
        self.total += nbytes
        displaced = 0
        while self.total > self.max_bytes and self._queue:
            heaviest = max(self._by_peer, key=lambda p: (self._by_peer[p], p == peer))
            victim = next(w for w in self._queue if w.peer == heaviest)
            self._queue.remove(victim)
            self._forget(victim)
            displaced += len(victim.records)
        return displaced

    def _forget(self, w: Waiting) -> None:
        self._by_peer[w.peer] -= w.nbytes
        if self._by_peer[w.peer] <= 0:
            del self._by_peer[w.peer]
        self.total -= w.nbytes

    def count(self) -> int:
        return sum(len(w.records) for w in self._queue)

    def take(self) -> list[Waiting]:
        out, self._queue = list(self._queue), deque()
        self._by_peer.clear()
        self.total = 0
        return out
