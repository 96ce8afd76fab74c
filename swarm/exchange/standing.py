"""Per-peer standing: whom a round may wait for, whose bundles are fetched first, who is backed off
(docs/PROTOCOL.md §7.2; a receiver's own policy, nothing on the wire).

A peer earns standing only by delivering. Outcomes, per bundle:
  good   the node's ingest accepted at least one of its records (the node's verdict: Transport.judge)
  bad    it could not be fetched (unreachable, `not_found`, short stream, timeout), its bytes failed
         the digest or the decode, or every record of it was dropped (by the transport's checks or
         by the node's ingest)
A good outcome adds 1 to the peer's score, clears its strikes and marks when; a bad one subtracts 1,
adds a strike and backs the peer off for `backoff_s` · 2^(strikes − 1) seconds (at most
`backoff_max_s`): its announcements are not fetched meanwhile (each counted as drop reason
`backoff`). A bad outcome that comes while the peer is already backed off (fetches that were in
flight when it went down, or a burst of bad bundles) is the same failure: it adds no strike, so one
outage costs one backoff of `backoff_s` however many fetches it broke, and only a failed probation
doubles it (before, a node killed with three fetches in flight was ignored for 40 s after its restart).
The score decays with a half-life of HALF_LIFE_S, so history fades both ways.

States (metrics `peers_good`, `peers_new`, `peers_backoff`):
  good     its last outcome was good and came within `good_for_s`: the only peers a round waits for
           (swarm.wait_s), and the first whose bundles are fetched
  backoff  backed off now
  new      neither: seen, not judged yet, or judged bad and its backoff is over (on probation). A
           throwaway identity never leaves this state without delivering something the node uses.

Identities are free, so nothing here grows with their number: the table keeps at most `max_peers`
entries and, when full, forgets the least informative first (new before backed off before good,
then the smallest |score|, then the oldest). A forgotten peer is new again: it costs at most one more fetch,
which the fan-in budget bounds. Not thread-safe: swarm.exchange.transport.Inbox calls it under its lock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

HALF_LIFE_S = 600.0  # a score halves in this long (in either direction)
GOOD, NEW, BACKOFF = "good", "new", "backoff"


@dataclass
class _Entry:
    score: float = 0.0
    at: float = 0.0  # when `score` was last brought up to date
    last_good: float = -math.inf  # when its last good outcome came
    strikes: int = 0  # bad outcomes since its last good one
    until: float = -math.inf  # backed off until
    cause: str = ""  # the reason of its last bad outcome


class Standing:
    """The per-peer book of outcomes (module docstring)."""

    def __init__(self, *, good_for_s: float = 120.0, backoff_s: float = 10.0, backoff_max_s: float = 600.0,
                 max_peers: int = 4096, half_life_s: float = HALF_LIFE_S):
        self.good_for_s, self.backoff_s, self.backoff_max_s = good_for_s, backoff_s, backoff_max_s
        self.max_peers, self.half_life_s = max_peers, half_life_s
        self._peers: dict[str, _Entry] = {}

    # -- outcomes ------------------------------------------------------------------------------
    def good(self, peer: str, now: float) -> None:
        e = self._entry(peer, now)
        e.score += 1.0
        e.last_good, e.strikes, e.until, e.cause = now, 0, -math.inf, ""

    def bad(self, peer: str, now: float, cause: str) -> None:
        e = self._entry(peer, now)
        e.cause = cause
        if now < e.until:  # already backed off: the same failure, no further strike (module docstring)
            return
        e.score -= 1.0
        e.strikes += 1
        e.until = now + min(self.backoff_max_s, self.backoff_s * 2.0 ** min(e.strikes - 1, 30))

    # -- questions -----------------------------------------------------------------------------
    def state(self, peer: str, now: float) -> str:
        e = self._peers.get(peer)
        if e is None:
            return NEW
        if now < e.until:
            return BACKOFF
        if e.strikes == 0 and now - e.last_good <= self.good_for_s:
            return GOOD
        return NEW

    def score(self, peer: str, now: float) -> float:
        e = self._peers.get(peer)
        return 0.0 if e is None else self._decayed(e, now)

    def earned(self, now: float) -> list[str]:
        """The peers a round may wait for (state good)."""
        return [p for p in self._peers if self.state(p, now) == GOOD]

    def counts(self, peers, now: float) -> dict[str, int]:
        """How many of `peers` (e.g. those seen announcing) are in each state."""
        out = {GOOD: 0, NEW: 0, BACKOFF: 0}
        for p in peers:
            out[self.state(p, now)] += 1
        return out

    def backed_off(self, now: float, limit: int = 4) -> dict[str, str]:
        """Up to `limit` backed-off peers (most strikes first) → the cause of their last bad outcome."""
        off = sorted((p for p, e in self._peers.items() if now < e.until), key=lambda p: -self._peers[p].strikes)
        return {p: self._peers[p].cause for p in off[:limit]}

    def read_order(self, now: float, limit: int = 64) -> tuple[list[str], list[str]]:
        """(up to `limit` peers in good standing, up to 4 × `limit` backed-off ones): whom a DHT read keeps first
        and last when a key holds more entries than it keeps (swarm.dht.entries.pick_entries)."""
        return self.earned(now)[:limit], [p for p, e in self._peers.items() if now < e.until][:4 * limit]

    def __len__(self) -> int:
        return len(self._peers)

    # -- the book --------------------------------------------------------------------------------
    def _decayed(self, e: _Entry, now: float) -> float:
        return e.score * 0.5 ** (max(0.0, now - e.at) / self.half_life_s)

    def _entry(self, peer: str, now: float) -> _Entry:
        e = self._peers.get(peer)
        if e is None:
            if len(self._peers) >= self.max_peers:
                self._forget(now)
            e = self._peers[peer] = _Entry(at=now)
        else:
            e.score, e.at = self._decayed(e, now), now
        return e

    def _forget(self, now: float) -> None:
        """Make room: drop a quarter of the table, the least informative entries first."""
        order = {NEW: 0, BACKOFF: 1, GOOD: 2}  # new ones go first, peers in good standing last

        def doom_rank(p: str) -> tuple:
            e = self._peers[p]
            return (order[self.state(p, now)], abs(self._decayed(e, now)), max(e.at, e.last_good))
        doomed = sorted(self._peers, key=doom_rank)[: max(1, self.max_peers // 4)]
        for p in doomed:
            del self._peers[p]


class Awaiting:
    """Whom a round waits for (swarm.wait_s): peers in good standing that delivered nothing since the last take
    and did not let the last wait run out. A wait that runs out marks the peers it waited for silent until they
    deliver again: a peer that delivered once and left costs one wait, not one a round for good_for_s. Both sets
    hold only peers of the bounded table (silent ones are pruned to those still in good standing)."""

    def __init__(self):
        self.delivered: set[str] = set()  # peers with records delivered since the last take
        self.silent: set[str] = set()

    def delivery(self, peer: str) -> None:
        self.delivered.add(peer)
        self.silent.discard(peer)

    def awaited(self, standing: Standing, now: float) -> list[str]:
        return [p for p in standing.earned(now) if p not in self.delivered and p not in self.silent]

    def silence(self, standing: Standing, now: float) -> None:
        self.silent = {p for p in self.silent if standing.state(p, now) == GOOD}
        self.silent.update(self.awaited(standing, now))
