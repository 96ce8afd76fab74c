"""The fan-in choice of the receiver's book (docs/PROTOCOL.md §7.1): which candidates are fetched, and when.

A mixin of swarm.exchange.inbox.Inbox (its candidates, fetch log, quotas, standing, lock and rng): `choose` picks
what to fetch now within `max_fetches_per_window` per window of wall time, peers in good standing first, then the
others within their share and the newcomers' reserve; `_reserve` books one fetch against the budget and the peer's
window quota (also for a pushed bundle, Inbox.claim).

Fresh first: within each class a peer whose newest candidate is *fresh* — it reached us within FRESH_PACES pace
intervals of window_s / budget (1.25 s with the defaults: `fresh_limit`) and its `created_at` is at most 0.6 of a
window behind our clock (`fresh_age`: 6 s; a candidate a round old, as every one of the deterministic twin's, is not
fresh) — goes before every peer whose candidates are older, and among the fresh ones fairness
orders them (fewest fetches within max_age_s first, then the one that arrived last, then at random). Freshness is
counted from arrival by a push or by gossip, so one dated ahead of our clock is no fresher than one that has just
arrived, and a peer whose clock is seconds behind ours is not made stale by it (in a scratch run of bench/scale,
whose clocks are ± 3 s off, counting from `created_at` left about half the fresh candidates stale). A DHT read makes
no candidate fresh: it is discovery and brings announcements seconds old (in a scratch run of the sharded
simulation, the fair order then chose such ones first).
The choice runs when an announcement arrives (a push, a gossiped message, a DHT read), so a fresh bundle is chosen
as it arrives while the budget has room, not when its peer's turn among all the peers comes round: with ≈ N
candidates a window and a budget of 16, that turn came every N / 16 windows (docs/benchmarks/scale.md §16 point 3).

Fresh first alone is not fair when the budget binds: a slot frees one window after its fetch, so a busy receiver's
choices come back at the moments of its first ones, and only the peers whose announcements arrive just before those
moments are ever fresh when a slot frees (a scratch run saw 285 of 400 peers never fetched in two minutes: the first
16 arrivals took the budget within 0.6 s, and every window after freed it in the same 0.6 s). So while more than
twice the budget's new candidates arrive in a window by push or gossip (`_oversubscribed`), fresh fetches are paced
at the budget's own rate, FRESH_BURST at once at most (a swarm.bucket.TokenBucket), while a fresh candidate waits
for the pace no older one takes its room, and a slot that frees with nothing fresh waiting is kept for a fresh one up
to `fresh_limit` before an older one takes it: the choices spread over the window, every moment of it is within
the fresh age of one of them, and fairness among the fresh ones rotates the peers (tests/unit/swarm/test_fresh_first.py).
A swarm whose announcements the budget can take is not paced: each is chosen as it arrives. Older candidates are
never paced, and when none is fresh the order is exactly the fair one it was before, with the same draws of the rng:
the deterministic twin, whose every candidate is a round old, chooses as before.
"""

from __future__ import annotations

import math
from collections import Counter

from protocols.records import Announcement
from swarm.bucket import TokenBucket
from swarm.exchange.standing import GOOD

FRESH_PACES = 2.0  # a candidate younger than this many pace intervals (window_s / budget) is fresh
FRESH_BURST = 2  # fresh fetches started at once, at most, beyond the pace
OVERSUBSCRIBED = 2  # paced while more than this many times the budget's new candidates arrive in a window
CLOCK_SLACK = 0.6  # a fresh candidate's created_at is at most this share of a window behind our clock


def fresh_limit(limits) -> float:
    """How recently a fresh candidate reached us: within FRESH_PACES × window_s / max_fetches_per_window (1.25 s with
    the defaults)."""
    return FRESH_PACES * limits.window_s / max(1, limits.max_fetches_per_window)


def fresh_age(inbox, ann: Announcement, now: float) -> float | None:
    """Seconds since `ann` reached the inbox if it is fresh — it reached us within `fresh_limit` and its `created_at`
    is at most CLOCK_SLACK of a window behind our clock (6 s), so that a late DHT read of an old one is not fresh
    while peers' clocks may be seconds apart —, else None (caller holds the inbox's lock)."""
    lim = inbox.limits
    heard = inbox._heard.get((ann.peer, ann.sha256), now)
    if now - heard > fresh_limit(lim) or now - ann.created_at > CLOCK_SLACK * lim.window_s:
        return None
    return now - heard


class FanIn:
    """The fan-in choice of Inbox (module docstring); every method runs under the Inbox's lock or takes it."""

    def choose(self, now: float) -> list[Announcement]:
        """Candidates to fetch now: at most max_fetches_per_window started per window_s of wall time; peers in
        good standing first (fresh first, then fewest fetches within max_age_s first, then the youngest fresh one,
        ties at random), then the others (fresh first, then best score first) within their share, which includes a
        small reserve; fresh ones at the pace (module docstring); each peer's newest first. Chosen ones leave the
        candidates."""
        with self.cond:
            self._expire(now)
            counts = Counter(p for _, p, _ in self._fetch_log)  # fairness: fetches per peer within max_age_s
            in_window = self._in_window(now)  # shares: fetches per peer in the window of wall time ending now
            room, stranger_room = self._room(now)
            pace, paced = self._fresh_pace(now), self._oversubscribed(now)
            reserve = max(1, self.limits.max_fetches_per_window // 8) - sum(
                s for t, _, s in self._fetch_log if t > now - self.limits.window_s)  # still owed to newcomers
            state = {p: self.standing.state(p, now) for p in self._candidates}
            share, stranger_share = self._shares(now)
            stale, age = self._stale_by(now)
            chosen = []
            while room > 0 and self._candidates:
                good = [p for p in self._candidates if state[p] == GOOD and in_window[p] < share]
                others = [p for p in self._candidates if state[p] != GOOD and in_window[p] < stranger_share]
                # while a fresh candidate waits (its peer's share allowing it now or not), only fresh ones are chosen,
                # as the pace allows: the room is kept for them
                fresh = {p for p in self._candidates if not stale(p)} if paced else set()
                if fresh:
                    if pace.refill(now) < 1:
                        break
                    good, others = [p for p in good if p in fresh], [p for p in others if p in fresh]
                    self._idle_since = None
                elif paced:  # room, and nothing fresh: kept for a fresh one up to fresh_limit, then an older one
                    if self._idle_since is None:
                        self._idle_since = now
                    if now - self._idle_since < fresh_limit(self.limits):
                        break
                newcomers = bool(others) and stranger_room > 0
                if good and not (newcomers and reserve > 0):
                    peer = min(good, key=lambda p: (stale(p), counts[p], age(p), self.rng.random()))
                    stranger = False
                elif newcomers:
                    peer = min(others, key=lambda p: (stale(p), -self.standing.score(p, now), counts[p], age(p),
                                                      self.rng.random()))
                    stranger = True
                else:
                    break
                ann = self._candidates[peer].pop(0)
                if not self._candidates[peer]:
                    del self._candidates[peer]
                if self._reserve(ann, now, stranger):
                    counts[peer] += 1
                    in_window[peer] += 1
                    if fresh:
                        pace.take(1, now)
                    room -= 1
                    stranger_room -= stranger
                    reserve -= stranger
                    chosen.append(ann)
            return chosen

    def _stale_by(self, now: float):
        """(`stale(peer)`, `age(peer)`): whether the peer's newest candidate is not fresh (`fresh_age`), and how long
        ago it reached us if it is (0 if not: older candidates are ordered as before, by fairness alone) (caller holds
        the lock)."""
        def age(peer: str) -> float:
            a = fresh_age(self, self._candidates[peer][0], now)
            return a if a is not None else 0.0
        return (lambda peer: fresh_age(self, self._candidates[peer][0], now) is None), age

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

    def _fresh_pace(self, now: float) -> TokenBucket:
        """The pace of fresh fetches: the budget's own rate (max_fetches_per_window / window_s), at most FRESH_BURST
        at once; started at the first use, on the caller's clock (caller holds the lock)."""
        if self._pace is None:
            lim = self.limits
            self._pace = TokenBucket(lim.max_fetches_per_window / lim.window_s, FRESH_BURST, now)
        return self._pace

    def _oversubscribed(self, now: float) -> bool:
        """More than OVERSUBSCRIBED times the budget's new candidates arrived by push or gossip within the last
        window_s (DHT reads are not counted: they make nothing fresh) (caller holds the lock): only then are fresh
        fetches paced, and a small swarm's announcements, or a receiver's that reads the DHT alone, are chosen as
        they come."""
        arrivals = self._arrivals
        return len(arrivals) == arrivals.maxlen and arrivals[0] > now - self.limits.window_s

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

