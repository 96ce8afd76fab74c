"""The receiver's book of the exchange (swarm.exchange.transport describes the exchange): fetch candidates, the
fan-in choice, delivered records, drops, and every peer's standing (swarm.exchange.standing).

Who is fetched first (docs/PROTOCOL.md §7.1–7.2): peers in good standing (a bundle of theirs was used
recently and nothing failed since), fairly among them (fewest fetches within max_age_s first); then
the others — new identities and peers on probation after a backoff — best score first, at random
among equals. While any peer is in good standing, the others take at most half of a window's fetch
budget, so strangers, however many, cannot spend the fetches our known-good peers need; and at
least an eighth of it (at least one) whenever they have candidates, so that known-good peers that
fill the budget do not shut newcomers out. No peer takes more than its share of a window
(`_shares`): its class's budget over the peers of its class that want fetches, so one peer that
publishes (or re-publishes others' records) many times a window cannot take the fetches the others
need when their own bundles come. A pushed bundle is booked by the same rules (`claim`). A
backed-off peer's announcements are not fetched (`backoff`). Decoded records wait for the node's
next round in a book bounded in bytes (swarm.exchange.pending), decoded one bundle at a time.

Bounded whatever the number of identities: at most `limits.max_peers` peers are tracked as seen and
as judged; candidates of peers not in good standing are at most MAX_STRANGER_CANDIDATES together (a
random subset is kept, so a flood cannot choose whom it pushes out); vetted announcement values are
remembered as 16-byte digests, at most MAX_VETTED of them; fetches, quotas and the fetch log are
bounded by the fan-in budget. The work per window is bounded by what a poll reads (keys × entries
per key) and by the budget, not by how many identities announce.
"""

from __future__ import annotations

import hashlib
import math
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import replace

from protocols.codec import RecordError
from protocols.records import Announcement, RolloutRecord
from swarm.exchange.fanin import OVERSUBSCRIBED, FanIn, fresh_age
from swarm.exchange.pending import Pending
from swarm.exchange.receive import (
    MAX_CANDIDATES_PER_PEER,
    Delivery,
    Limits,
    decoded_bytes,
    open_bundle,
    vet_announcement,
)
from swarm.exchange.standing import BACKOFF, GOOD, Awaiting, Standing

MAX_STRANGER_CANDIDATES = 64  # candidates of peers not in good standing, all together
MAX_VETTED = 1 << 15  # announcement values remembered as already vetted (16-byte digests)
NOTIFY_STRANGERS = 2  # peers not in good standing among those our announcements are pushed to


class Inbox(FanIn):
    """Thread-safe book of the exchange: fetch candidates, fair fetch choice, delivered records, drops.

    Writers (a poll, a notification, a fetch finishing) call `offer`, `settle_fetched`, `drop`; the
    transport asks `choose` what to fetch next; the node's `take` waits on it and empties it, and
    the node's verdict on what it used comes back through `judge`. Every book is bounded (module
    docstring); entries older than max_age_s are forgotten.
    """

    def __init__(self, limits: Limits, rng: random.Random | None = None, clock: Callable[[], float] = time.time):
        self.limits = limits
        self.rng = rng or random.Random()
        self.clock = clock
        self.cond = threading.Condition()
        self.standing = Standing(good_for_s=limits.good_for_s, backoff_s=limits.backoff_s,
                                 backoff_max_s=limits.max_age_s, max_peers=limits.max_peers)
        self._vetted: dict[bytes, float] = {}  # digest of (signer, value) → when first vetted
        self._fetched: dict[tuple[str, str], float] = {}  # (peer, sha256) fetched or taken from a push → when
        self._candidates: dict[str, list[Announcement]] = {}  # peer → valid unfetched announcements, newest first
        self._heard: dict[tuple[str, str], float] = {}  # (peer, sha256) of a candidate → when it reached us
        self._fetch_log: deque[tuple[float, str, bool]] = deque()  # (start, peer, not in good standing) within max_age_s
        self._pace = None  # the pace of fresh fetches, a swarm.bucket.TokenBucket from the first use (fanin)
        self._idle_since: float | None = None  # when room was left free for a fresh candidate (fanin)
        self._arrivals: deque[float] = deque(maxlen=OVERSUBSCRIBED * limits.max_fetches_per_window + 1)  # pushed, gossiped
        self._quota: dict[tuple[str, int], tuple[int, int]] = {}  # (peer, window) → (records, bytes) fetched
        self._peers: dict[str, float] = {}  # peer → when it last announced: created_at, at most our clock then
        self._addrs: dict[str, str] = {}  # peer → the dial hint of its newest valid announcement (protocols.addrs)
        self._pending = Pending(limits.pending_cap())  # decoded records waiting for the node's take
        self._decoding = threading.Lock()  # one bundle decoded at a time: its transient memory is one bundle's
        self._drops: Counter = Counter()
        self._skipped = 0
        self._bytes = 0  # bundle bytes fetched since the last take
        self._waits = Awaiting()  # whom a round waits for

    def limit_completions(self, tokens: int) -> None:
        """Decode bundles under the receiver's own budget per completion (swarm.exchange.receive.Limits.completion_tokens)."""
        with self.cond:
            self.limits = replace(self.limits, completion_tokens=tokens)
            self._pending.max_bytes = self.limits.pending_cap()

    # -- writers ---------------------------------------------------------------------------
    def offer(self, value: object, signer: str | None, *, now: float, key_window: int | None = None,
              key_shard: int | None = None) -> bool:
        """Vet one announcement; a valid new one becomes a fetch candidate. True when it did."""
        return self._candidate(value, signer, now=now, key_window=key_window, key_shard=key_shard) is not None

    def claim(self, value: object, signer: str, *, now: float) -> Announcement | None:
        """A bundle offered with its bytes (a push, docs/PROTOCOL.md §6.3): vet it like `offer`, then take it
        now if the fan-in budget, the peer's share of the window and its quota allow, exactly as `choose`
        would. None: declined. An offer that names addresses comes from a peer we can dial: it stays a
        candidate, fetched when `choose` picks it, so pushing gains a peer nothing over announcing. A valid
        one the budget has no room for is counted as skipped, like a candidate that ages out."""
        ann = self._candidate(value, signer, now=now)
        if ann is None or ann.addrs:
            return None
        with self.cond:
            self._expire(now)
            queue = self._candidates.get(ann.peer, [])
            if ann not in queue:  # already pushed out by the peer's newer candidates (counted as skipped)
                return None
            queue.remove(ann)
            if not queue:
                del self._candidates[ann.peer]
            stranger = self.standing.state(ann.peer, now) != GOOD
            room, stranger_room = self._room(now)
            in_window = self._in_window(now)
            share = self._shares(now)[stranger]
            if (stranger_room if stranger else room) <= 0 or in_window[ann.peer] >= share:
                self._skipped += 1
                return None
            return ann if self._reserve(ann, now, stranger) else None

    def _candidate(self, value: object, signer: str | None, *, now: float, key_window: int | None = None,
                   key_shard: int | None = None) -> Announcement | None:
        raw = bytes(value) if isinstance(value, (bytes, bytearray)) else repr(value)[:256].encode()
        marker = hashlib.blake2b(repr(signer).encode() + b"\0" + raw, digest_size=16).digest()
        with self.cond:
            if marker in self._vetted:
                return None
            self._vetted[marker] = now
            if len(self._vetted) > MAX_VETTED:  # the oldest half goes (insertion order is first-seen order)
                self._vetted = dict(list(self._vetted.items())[MAX_VETTED // 2:])
        try:
            ann = vet_announcement(value, signer, self.limits, now=now, key_window=key_window, key_shard=key_shard)
        except RecordError as exc:
            self.drop(exc.reason)
            return None
        with self.cond:
            self._saw(ann, now)
            queue = self._candidates.get(ann.peer, [])
            if ann.count == 0 or (ann.peer, ann.sha256) in self._fetched or any(a.sha256 == ann.sha256 for a in queue):
                return None  # an empty bundle is a hello: nothing to fetch
            if self.standing.state(ann.peer, now) == BACKOFF:
                self._drops["backoff"] += 1
                self.cond.notify_all()
                return None
            queue = self._candidates.setdefault(ann.peer, [])
            queue.append(ann)
            # when it reached us; a DHT read (a key's window given) makes no candidate fresh, nor counts towards the
            # pace: it is discovery, and brings announcements seconds old (swarm.exchange.fanin)
            self._heard[(ann.peer, ann.sha256)] = now if key_window is None else -math.inf
            if key_window is None:
                self._arrivals.append(now)
            queue.sort(key=lambda a: -a.created_at)
            self._skipped += len(queue[MAX_CANDIDATES_PER_PEER:])
            del queue[MAX_CANDIDATES_PER_PEER:]
            self._cap_strangers(now)
            self.cond.notify_all()
            return ann if ann in self._candidates.get(ann.peer, ()) else None

    def _saw(self, ann: Announcement, now: float) -> None:
        """Remember the peer as seen (caller holds the lock); past max_peers, forget the oldest not in good standing."""
        heard = min(ann.created_at, now)  # a peer dated ahead of our clock is not more recent than now
        if heard >= self._peers.get(ann.peer, 0.0):
            self._peers[ann.peer] = heard
            self._addrs[ann.peer] = ann.addrs
        if len(self._peers) > self.limits.max_peers:
            others = sorted((p for p in self._peers if self.standing.state(p, now) != GOOD), key=self._peers.get)
            for p in others[: max(1, self.limits.max_peers // 4)]:
                self._peers.pop(p, None)
                self._addrs.pop(p, None)

    def _cap_strangers(self, now: float) -> None:
        """At most MAX_STRANGER_CANDIDATES candidates of peers not in good standing: random ones go (skipped), those
        that are no longer fresh (swarm.exchange.fanin) before fresh ones."""
        strangers = [(p, a) for p, q in self._candidates.items() if self.standing.state(p, now) != GOOD for a in q]
        over = len(strangers) - MAX_STRANGER_CANDIDATES
        if over <= 0:
            return
        older = [(p, a) for p, a in strangers if fresh_age(self, a, now) is None]
        going = self.rng.sample(older, min(over, len(older)))
        if over > len(older):
            kept = [x for x in strangers if x not in older]
            going += self.rng.sample(kept, over - len(older))
        for peer, ann in going:
            self._candidates[peer].remove(ann)
            if not self._candidates[peer]:
                del self._candidates[peer]
            self._skipped += 1

    def settle(self, ann: Announcement, records: list[RolloutRecord], drops: Counter, nbytes: int | None = None) -> None:
        """File a bundle's decoded records (`nbytes`: their size in memory, estimated from them when None)."""
        nbytes = decoded_bytes(records) if nbytes is None else nbytes
        with self.cond:
            self._drops.update(drops)
            if records:
                displaced = self._pending.add(ann.peer, records, nbytes)
                if displaced:
                    self._drops["inbox_full"] += displaced
                self._waits.delivery(ann.peer)
            self.cond.notify_all()

    def drop(self, reason: str, count: int = 1) -> None:
        with self.cond:
            self._drops[reason] += count
            self.cond.notify_all()

    def settle_fetched(self, ann: Announcement, data: bytes | None, swarm_id: str,
                       fail_reason: str = "fetch_failed") -> None:
        """Decode and file a fetched bundle (`data` None: the fetch failed with `fail_reason`). A failed
        fetch, a refused bundle or one whose every record is dropped backs the peer off; a publisher that answered
        `busy` to every try (docs/PROTOCOL.md §6.1) is counted, never backed off."""
        if data is None:
            if fail_reason != "busy":
                self._fail(ann.peer, fail_reason)
            self.drop(fail_reason)
            return
        with self.cond:
            self._bytes += len(data)
        try:
            with self._decoding:
                records, drops = open_bundle(data, ann, swarm_id, self.limits)
        except RecordError as exc:
            self._fail(ann.peer, exc.reason)
            self.drop(exc.reason)
            return
        if not records and drops:
            self._fail(ann.peer, drops.most_common(1)[0][0])
        self.settle(ann, records, drops)

    def judge(self, outcomes: dict[str, tuple[int, int]]) -> None:
        """The node's verdict on the records it was handed: peer → (records it used, records it dropped).
        A peer with a used record is in good standing; one whose every record was dropped is backed off."""
        now = self.clock()
        for peer, (used, dropped) in outcomes.items():
            if used > 0:
                with self.cond:
                    self.standing.good(peer, now)
            elif dropped > 0:
                self._fail(peer, "records_dropped")

    def vouch(self, limit: int) -> list[str]:
        """Up to `limit` of the peers seen, most recently active first, in good standing as if they had delivered:
        the peers a local experiment starts together with (swarm.start_with_peers). A failure backs them off
        like any other."""
        with self.cond:
            now = self.clock()
            peers = sorted(self._peers, key=lambda p: -self._peers[p])[:limit]
            for p in peers:
                self.standing.good(p, now)
            return peers

    def _fail(self, peer: str, cause: str) -> None:
        """A bad outcome: back the peer off, and drop its waiting candidates (counted as `backoff`)."""
        with self.cond:
            self.standing.bad(peer, self.clock(), cause)
            dropped = self._candidates.pop(peer, [])
            if dropped:
                self._drops["backoff"] += len(dropped)
            self.cond.notify_all()

    def _expire(self, now: float) -> None:
        """Forget what is older than max_age_s (candidates so dropped count as skipped)."""
        lim = self.limits
        horizon = now - lim.max_age_s
        while self._fetch_log and self._fetch_log[0][0] < horizon:
            self._fetch_log.popleft()
        for peer in list(self._candidates):
            fresh = [a for a in self._candidates[peer] if a.created_at >= horizon]
            self._skipped += len(self._candidates[peer]) - len(fresh)
            if fresh:
                self._candidates[peer] = fresh
            else:
                del self._candidates[peer]
        if len(self._heard) > 2 * sum(map(len, self._candidates.values())) + 64:  # forget those no longer candidates
            kept = {(p, a.sha256) for p, q in self._candidates.items() for a in q}
            self._heard = {k: t for k, t in self._heard.items() if k in kept}
        keep_from = horizon - lim.max_clock_skew_s
        self._fetched = {k: t for k, t in self._fetched.items() if t >= keep_from}
        while self._vetted and next(iter(self._vetted.values())) < keep_from:
            del self._vetted[next(iter(self._vetted))]
        oldest_window = int(horizon // lim.window_s) - 1
        self._quota = {k: v for k, v in self._quota.items() if k[1] >= oldest_window}
        self._peers = {p: t for p, t in self._peers.items() if t >= horizon}
        self._addrs = {p: a for p, a in self._addrs.items() if p in self._peers}

    # -- the node's side -------------------------------------------------------------------
    def ready_count(self) -> int:
        with self.cond:
            return self._pending.count()

    def peers_seen(self) -> int:
        with self.cond:
            return len(self._peers)

    def earned(self) -> int:
        """Peers in good standing: the only ones a round waits for (swarm.exchange.standing)."""
        with self.cond:
            return len(self.standing.earned(self.clock()))

    def awaited(self) -> int:
        """What a round may still wait for (swarm.exchange.standing.Awaiting)."""
        with self.cond:
            return len(self._waits.awaited(self.standing, self.clock()))

    def silence(self) -> None:  # a round's wait ran out: not waited for again until they deliver
        with self.cond:
            self._waits.silence(self.standing, self.clock())

    def is_good(self, peer: str) -> bool:
        with self.cond:
            return self.standing.state(peer, self.clock()) == GOOD

    def known_peers(self) -> list[str]:
        """Peers with a valid announcement younger than max_age_s: those in good standing first (best score
        first), then the most recently heard from (by our clock: a peer dating its announcements ahead of it
        gains nothing)."""
        with self.cond:
            now = self.clock()
            return sorted(self._peers, key=lambda p: (self.standing.state(p, now) != GOOD,
                                                       -self.standing.score(p, now), -self._peers[p]))

    def push_targets(self, limit: int) -> list[str]:
        """Up to `limit` of `known_peers` our announcements (or bundles) are pushed to: those in good standing,
        and at most NOTIFY_STRANGERS others — each push is a dial at addresses the peer chose (swarm.net.dial), and
        a flood of identities must not turn our every publish into dials of its choosing."""
        with self.cond:
            now = self.clock()
            peers = self.known_peers()
            good = [p for p in peers if self.standing.state(p, now) == GOOD]
            return (good + [p for p in peers if p not in good][:NOTIFY_STRANGERS])[:limit]

    def addrs_of(self, peer: str) -> list[str]:
        """The addresses `peer` named in its newest valid announcement (may be empty)."""
        with self.cond:
            return self._addrs.get(peer, "").split()

    def take(self, min_records: int, timeout: float, stopped: threading.Event | None = None, *,
             while_earned: bool = False) -> Delivery:
        """Everything delivered since the last call; waits (≤ timeout) only while fewer than `min_records` are
        ready (with `while_earned`, only while swarm.exchange.standing.Awaiting names a peer; a wait that runs out
        `silence`s them)."""
        started = time.monotonic()
        deadline = started + max(0.0, timeout)
        with self.cond:
            while self._pending.count() < min_records and not (stopped and stopped.is_set()):
                left = deadline - time.monotonic()
                if while_earned and not self._waits.awaited(self.standing, self.clock()):
                    break
                if left <= 0:
                    if while_earned:
                        self.silence()
                    break
                self.cond.wait(min(left, 0.5))
            ready = self._pending.take()
            drops, self._drops = self._drops, Counter()
            skipped, self._skipped = self._skipped, 0
            nbytes, self._bytes = self._bytes, 0
            self._waits.delivered = set()
            now = self.clock()
            return Delivery(records=[r for d in ready for r in d.records], drops=drops,
                            peers=list(dict.fromkeys(d.peer for d in ready)), peers_seen=len(self._peers),
                            skipped=skipped, bytes=nbytes, waited_s=time.monotonic() - started,
                            standing=self.standing.counts(self._peers, now),
                            backed_off=self.standing.backed_off(now))
