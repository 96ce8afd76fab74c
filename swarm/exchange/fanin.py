"""The fan-in choice of the receiver's book (docs/PROTOCOL.md §7.1): which candidates are fetched, and when.

A mixin of swarm.exchange.inbox.Inbox (its candidates, fetch log, quotas, standing, lock and rng): `choose` picks
what to fetch now within `max_fetches_per_window` per window of wall time, peers in good standing first (fewest
fetches within max_age_s first), then the others within their share and the newcomers' reserve; `_reserve` books one
fetch against the budget and the peer's window quota (also for a pushed bundle, Inbox.claim).
"""

from __future__ import annotations

import math
from collections import Counter

from protocols.records import Announcement
from swarm.exchange.standing import GOOD


class FanIn:
    """The fan-in choice of Inbox (module docstring); every method runs under the Inbox's lock or takes it."""

    def choose(self, now: float) -> list[Announcement]:
        """Candidates to fetch now: at most max_fetches_per_window started per window_s of wall time; peers in
        good standing first (fewest fetches within max_age_s first, ties at random), then the others (best
        score first) within their share, which includes a small reserve (module docstring); each peer's
        newest first. Chosen ones leave the candidates."""
        with self.cond:
            self._expire(now)
            counts = Counter(p for _, p, _ in self._fetch_log)  # fairness: fetches per peer within max_age_s
            in_window = self._in_window(now)  # shares: fetches per peer in the window of wall time ending now
            room, stranger_room = self._room(now)
            reserve = max(1, self.limits.max_fetches_per_window // 8) - sum(
                s for t, _, s in self._fetch_log if t > now - self.limits.window_s)  # still owed to newcomers
            state = {p: self.standing.state(p, now) for p in self._candidates}
            share, stranger_share = self._shares(now)
            chosen = []
            while room > 0 and self._candidates:
                good = [p for p in self._candidates if state[p] == GOOD and in_window[p] < share]
                others = [p for p in self._candidates if state[p] != GOOD and in_window[p] < stranger_share]
                newcomers = bool(others) and stranger_room > 0
                if good and not (newcomers and reserve > 0):
                    peer, stranger = min(good, key=lambda p: (counts[p], self.rng.random())), False
                elif newcomers:
                    peer = min(others, key=lambda p: (-self.standing.score(p, now), counts[p], self.rng.random()))
                    stranger = True
                else:
                    break
                ann = self._candidates[peer].pop(0)
                if not self._candidates[peer]:
                    del self._candidates[peer]
                if self._reserve(ann, now, stranger):
                    counts[peer] += 1
                    in_window[peer] += 1
                    room -= 1
                    stranger_room -= stranger
                    reserve -= stranger
                    chosen.append(ann)
            return chosen

    def _in_window(self, now: float) -> Counter:
        """Fetches per peer started in the window of wall time ending now (caller holds the lock)."""
        return Counter(p for t, p, _ in self._fetch_log if t > now - self.limits.window_s)

    def _shares(self, now: float) -> tuple[int, int]:
        """Fetches one peer may start per window: (in good standing, any other). Each class's budget (the whole
        budget; the strangers' half while any peer is in good standing) over the peers of that class that want
        fetches — a candidate now, or a fetch within the last two windows (caller holds the lock)."""
        recent = {p for t, p, _ in self._fetch_log if t > now - 2 * self.limits.window_s} | set(self._candidates)
        good = sum(self.standing.state(p, now) == GOOD for p in recent)
        budget = self.limits.max_fetches_per_window
        stranger_budget = budget // 2 if self.standing.earned(now) else budget
        return math.ceil(budget / max(1, good)), max(1, math.ceil(stranger_budget / max(1, len(recent) - good)))

    def _room(self, now: float) -> tuple[int, int]:
        """(fetches the budget still allows in the window of wall time ending now, of which peers not in good
        standing may take) (caller holds the lock)."""
        lim = self.limits
        recent = [stranger for t, _, stranger in self._fetch_log if t > now - lim.window_s]
        room = lim.max_fetches_per_window - len(recent)
        if not self.standing.earned(now):
            return room, room
        return room, min(room, lim.max_fetches_per_window // 2 - sum(recent))

    def _reserve(self, ann: Announcement, now: float, stranger: bool) -> bool:
        """Book one fetch of `ann` against the budget and the peer's window quota (caller holds the lock)."""
        lim = self.limits
        used_n, used_b = self._quota.get((ann.peer, ann.window), (0, 0))
        if used_n + ann.count > lim.max_records_per_peer_window or used_b + ann.nbytes > lim.max_bytes_per_peer_window:
            self._drops["quota"] += 1
            return False
        self._quota[(ann.peer, ann.window)] = (used_n + ann.count, used_b + ann.nbytes)
        self._fetched[(ann.peer, ann.sha256)] = now
        self._fetch_log.append((now, ann.peer, stranger))
        return True

