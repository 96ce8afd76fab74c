"""The transport interface the node calls, and the receive-side rules every transport shares
(docs/ARCHITECTURE.md §5, docs/PROTOCOL.md §5–7). swarm.memory runs them without a network.

The exchange, as seen by one node — by swarm time, never by round:

    publish(records)      → encode one bundle, serve its bytes (for max_age_s), announce
                            {window, count, nbytes, sha256, …} under the key of the current
                            time window (protocols.keys), and push the same announcement to a
                            few recently seen peers so they need not wait for their next poll
    (in the background)   → read the recent windows' announcements, vet each one, keep the valid
                            ones as fetch candidates, fetch a fair, bounded subset (at most
                            `max_fetches_per_window` bundles per window of wall time, one peer's
                            newest first, the peers with the fewest recent fetches first), check
                            and decode what arrives
    take(min_records, T)  → everything delivered since the last call; waits at most T seconds,
                            and only while fewer than `min_records` records are ready

Receive-side rules (identical for every transport, so unit tests on the twin cover them):
- each bundle is fetched and handed out once: dedupe by (peer, sha256);
- an announcement is vetted before any byte is fetched: the signer (the DHT subkey's key, or the
  authenticated stream's peer) must be the announced peer (`forged`); its window must be the
  key's window and agree with its `created_at`, its shard the publisher's (`bad_announcement`);
  it must be younger than `max_age_s` (`stale_age`) and not from the future beyond the clock
  skew (`future_timestamp`); its size within the caps (`too_large`, `too_many_records`) and
  the peer's quota for that window (`quota`);
- after the fetch: digest (`digest_mismatch`), bundle decode (codec reasons), the record count
  against the announcement (`count_mismatch`), then per record: `peer` must be the signer
  (`forged`), `swarm` ours (`wrong_swarm`).
Bundle-level reasons count one per bundle; record-level reasons one per record. Announcements
that were valid but never fetched because the fan-in budget was spent are counted apart
(`skipped`): that is a choice, not a fault. A bundle offered with its bytes by a peer that cannot
be dialled (docs/PROTOCOL.md §6.3) goes through the same vetting and the same budget and quota
booking (`Inbox.claim`) before a byte is read. Nothing here ever raises on peer data.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Protocol

from protocols.codec import (
    DEFAULT_CAPS,
    Caps,
    RecordError,
    decode_announcement,
    decode_bundle,
    encode_announcement,
    encode_bundle,
    sha256_hex,
)
from protocols.keys import WINDOW_S, shard_of, window_of
from protocols.records import Announcement, RolloutRecord

MAX_CANDIDATES_PER_PEER = 4  # a peer's newest valid announcements kept waiting for a fetch slot


@dataclass
class Delivery:
    """What one `take` returns: records delivered since the last call and the exchange's state."""

    records: list[RolloutRecord] = field(default_factory=list)
    drops: Counter = field(default_factory=Counter)  # reason → count, each drop reported once
    peers: list[str] = field(default_factory=list)  # peers whose bundles are in `records`
    peers_seen: int = 0  # distinct peers with a valid announcement younger than max_age_s
    skipped: int = 0  # valid announcements left unfetched: the fan-in budget was spent
    bytes: int = 0  # bundle bytes downloaded since the last take
    waited_s: float = 0.0  # how long this call waited


class Transport(Protocol):
    peer_id: str

    def publish(self, records: list[RolloutRecord]) -> int: ...  # wire bytes published

    def take(self, min_records: int = 0, timeout: float = 0.0) -> Delivery: ...

    def peers_seen(self) -> int: ...  # peers with a valid announcement younger than max_age_s

    def shutdown(self) -> None: ...


@dataclass(frozen=True)
class Limits:
    """What a receiver accepts and how much it fetches."""

    caps: Caps = DEFAULT_CAPS
    max_records_per_peer_window: int = 256  # quota: records one peer may deliver per window
    max_bytes_per_peer_window: int = 16 << 20  # quota: wire bytes one peer may deliver per window
    max_age_s: float = 600.0  # older announcements are neither fetched nor served
    max_clock_skew_s: float = 120.0  # tolerated future timestamps from peers' clocks
    window_s: float = WINDOW_S  # swarm-wide: length of an announcement window
    shards: int = 4  # swarm-wide: keys one window's announcements are spread over
    max_fetches_per_window: int = 16  # fan-in: bundles fetched per window_s of wall time, all peers together


def make_bundle(peer: str, records: list[RolloutRecord], now: float | None = None,
                window_s: float = WINDOW_S, addrs: str = "") -> tuple[bytes, bytes, Announcement]:
    """(bundle bytes, announcement bytes, announcement) for our own records; `addrs`: our dial hint."""
    now = time.time() if now is None else now
    data = encode_bundle(records)
    version = max((r.policy_version for r in records), default=0)
    ann = Announcement(peer=peer, window=window_of(now, window_s), count=len(records), nbytes=len(data),
                       sha256=sha256_hex(data), policy_version=version, created_at=now, addrs=addrs)
    return data, encode_announcement(ann), ann


def vet_announcement(value: object, signer: str | None, limits: Limits, *, now: float,
                     key_window: int | None = None, key_shard: int | None = None) -> Announcement:
    """The announcement `value` from `signer`, or RecordError(reason).

    `signer` is the peer id bound to the signed DHT subkey or to the authenticated stream (None:
    nothing binds it). `key_window` / `key_shard`: the DHT key it was read under (None for a
    direct notification, which has no key).
    """
    if signer is None:
        raise RecordError("forged", "announcement under a subkey that is not an [owner:<key>] marker")
    ann = decode_announcement(value)
    if ann.peer != signer:
        raise RecordError("forged", f"announcement names peer {ann.peer[:16]!r}, signed by {signer[:16]!r}")
    if key_window is not None and ann.window != key_window:
        raise RecordError("bad_announcement", f"announces window {ann.window} under window {key_window}'s key")
    if key_shard is not None and shard_of(ann.peer, limits.shards) != key_shard:
        raise RecordError("bad_announcement", "announced under another peer's shard")
    if window_of(ann.created_at, limits.window_s) != ann.window:
        raise RecordError("bad_announcement", "window does not match created_at")
    if now - ann.created_at > limits.max_age_s:
        raise RecordError("stale_age", f"{now - ann.created_at:.0f} s old")
    if ann.created_at - now > limits.max_clock_skew_s:
        raise RecordError("future_timestamp", f"{ann.created_at - now:.0f} s in the future")
    if ann.nbytes > limits.caps.max_compressed_bytes:
        raise RecordError("too_large", f"{ann.nbytes} bytes > cap {limits.caps.max_compressed_bytes}")
    if ann.count > limits.caps.max_records:
        raise RecordError("too_many_records", f"{ann.count} records > cap {limits.caps.max_records}")
    if ann.count > limits.max_records_per_peer_window or ann.nbytes > limits.max_bytes_per_peer_window:
        raise RecordError("quota", f"{ann.count} records / {ann.nbytes} bytes over the per-peer window quota")
    return ann


def open_bundle(data: bytes, ann: Announcement, swarm_id: str, limits: Limits) -> tuple[list[RolloutRecord], Counter]:
    """Verified bytes of an announced bundle → (accepted records, record-level drops).

    Raises RecordError(reason) when the bundle as a whole is refused.
    """
    if len(data) != ann.nbytes or sha256_hex(data) != ann.sha256:
        raise RecordError("digest_mismatch", "bundle bytes differ from the announcement")
    records, drops = decode_bundle(data, limits.caps)
    if len(records) + sum(drops.values()) != ann.count:
        raise RecordError("count_mismatch", f"{len(records) + sum(drops.values())} records, announced {ann.count}")
    kept = []
    for rec in records:
        if rec.peer != ann.peer:
            drops["forged"] += 1
        elif rec.swarm != swarm_id:
            drops["wrong_swarm"] += 1
        else:
            kept.append(rec)
    return kept, drops


@dataclass
class _Delivered:
    peer: str
    records: list[RolloutRecord]


class Inbox:
    """Thread-safe book of the exchange: fetch candidates, fair fetch choice, delivered records, drops.

    Writers (a poll, a notification, a fetch finishing) call `offer`, `settle`, `drop`; the
    transport asks `choose` what to fetch next; the node's `take` waits on it and empties it.
    Every book is bounded: entries older than max_age_s are forgotten, candidates are capped
    per peer.
    """

    def __init__(self, limits: Limits, rng: random.Random | None = None):
        self.limits = limits
        self.rng = rng or random.Random()
        self.cond = threading.Condition()
        self._seen: dict[tuple, float] = {}  # (peer, sha256) or announcement value → when first seen
        self._candidates: dict[str, list[Announcement]] = {}  # peer → valid unfetched announcements, newest first
        self._fetch_log: deque[tuple[float, str]] = deque()  # (start time, peer) of fetches within max_age_s
        self._quota: dict[tuple[str, int], tuple[int, int]] = {}  # (peer, window) → (records, bytes) fetched
        self._peers: dict[str, float] = {}  # peer → created_at of its newest valid announcement
        self._addrs: dict[str, str] = {}  # peer → the dial hint of its newest valid announcement (protocols.addrs)
        self._ready: list[_Delivered] = []
        self._drops: Counter = Counter()
        self._skipped = 0
        self._bytes = 0  # bundle bytes fetched since the last take

    # -- writers ---------------------------------------------------------------------------
    def offer(self, value: object, signer: str | None, *, now: float, key_window: int | None = None,
              key_shard: int | None = None) -> bool:
        """Vet one announcement; a valid new one becomes a fetch candidate. True when it did."""
        return self._candidate(value, signer, now=now, key_window=key_window, key_shard=key_shard) is not None

    def claim(self, value: object, signer: str, *, now: float) -> Announcement | None:
        """A bundle offered with its bytes (a push, docs/PROTOCOL.md §6.3): vet it like `offer`, then take it
        now if the fan-in budget and the peer's quota allow, exactly as `choose` would. None: declined (a
        valid one the budget has no room for is counted as skipped, like a candidate that ages out)."""
        ann = self._candidate(value, signer, now=now)
        if ann is None:
            return None
        with self.cond:
            self._expire(now)
            queue = self._candidates.get(ann.peer, [])
            if ann not in queue:  # already pushed out by the peer's newer candidates (counted as skipped)
                return None
            queue.remove(ann)
            if not queue:
                del self._candidates[ann.peer]
            if self._room(now) <= 0:
                self._skipped += 1
                return None
            return ann if self._reserve(ann, now) else None

    def _candidate(self, value: object, signer: str | None, *, now: float, key_window: int | None = None,
                   key_shard: int | None = None) -> Announcement | None:
        marker = ("ann", signer, value if isinstance(value, (bytes, bytearray)) else repr(value)[:256])
        with self.cond:
            if marker in self._seen:
                return None
            self._seen[marker] = now
        try:
            ann = vet_announcement(value, signer, self.limits, now=now, key_window=key_window, key_shard=key_shard)
        except RecordError as exc:
            self.drop(exc.reason)
            return None
        with self.cond:
            if ann.created_at >= self._peers.get(ann.peer, 0.0):
                self._peers[ann.peer] = ann.created_at
                self._addrs[ann.peer] = ann.addrs
            if (ann.peer, ann.sha256) in self._seen or ann.count == 0:  # an empty bundle: a hello, nothing to fetch
                return None
            self._seen[(ann.peer, ann.sha256)] = now
            queue = self._candidates.setdefault(ann.peer, [])
            queue.append(ann)
            queue.sort(key=lambda a: -a.created_at)
            self._skipped += len(queue[MAX_CANDIDATES_PER_PEER:])
            del queue[MAX_CANDIDATES_PER_PEER:]
            self.cond.notify_all()
            return ann if ann in queue else None

    def settle(self, ann: Announcement, records: list[RolloutRecord], drops: Counter) -> None:
        with self.cond:
            self._drops.update(drops)
            if records:
                self._ready.append(_Delivered(ann.peer, records))
            self.cond.notify_all()

    def drop(self, reason: str, count: int = 1) -> None:
        with self.cond:
            self._drops[reason] += count
            self.cond.notify_all()

    def settle_fetched(self, ann: Announcement, data: bytes | None, swarm_id: str,
                       fail_reason: str = "fetch_failed") -> None:
        """Decode and file a fetched bundle (`data` None: the fetch failed with `fail_reason`)."""
        if data is None:
            self.drop(fail_reason)
            return
        with self.cond:
            self._bytes += len(data)
        try:
            records, drops = open_bundle(data, ann, swarm_id, self.limits)
        except RecordError as exc:
            self.drop(exc.reason)
            return
        self.settle(ann, records, drops)

    # -- the fan-in choice -----------------------------------------------------------------
    def choose(self, now: float) -> list[Announcement]:
        """Candidates to fetch now: at most max_fetches_per_window started per window_s of wall time; the
        peer with the fewest fetches within max_age_s first (ties at random), each peer's newest first.
        Chosen ones leave the candidates."""
        with self.cond:
            self._expire(now)
            counts = Counter(p for _, p in self._fetch_log)  # fairness: fetches per peer within max_age_s
            room = self._room(now)
            chosen = []
            while room > 0 and self._candidates:
                peer = min(self._candidates, key=lambda p: (counts[p], self.rng.random()))
                ann = self._candidates[peer].pop(0)
                if not self._candidates[peer]:
                    del self._candidates[peer]
                if self._reserve(ann, now):
                    counts[peer] += 1
                    room -= 1
                    chosen.append(ann)
            return chosen

    def _room(self, now: float) -> int:
        """Fetches the budget still allows in the window of wall time ending now (caller holds the lock)."""
        lim = self.limits
        return lim.max_fetches_per_window - sum(t > now - lim.window_s for t, _ in self._fetch_log)

    def _reserve(self, ann: Announcement, now: float) -> bool:
        """Book one fetch of `ann` against the budget and the peer's window quota (caller holds the lock)."""
        lim = self.limits
        used_n, used_b = self._quota.get((ann.peer, ann.window), (0, 0))
        if used_n + ann.count > lim.max_records_per_peer_window or used_b + ann.nbytes > lim.max_bytes_per_peer_window:
            self._drops["quota"] += 1
            return False
        self._quota[(ann.peer, ann.window)] = (used_n + ann.count, used_b + ann.nbytes)
        self._fetch_log.append((now, ann.peer))
        return True

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
        self._seen = {k: t for k, t in self._seen.items() if t >= horizon - lim.max_clock_skew_s}
        oldest_window = window_of(horizon, lim.window_s) - 1
        self._quota = {k: v for k, v in self._quota.items() if k[1] >= oldest_window}
        self._peers = {p: t for p, t in self._peers.items() if t >= horizon}
        self._addrs = {p: a for p, a in self._addrs.items() if p in self._peers}

    # -- the node's side -------------------------------------------------------------------
    def ready_count(self) -> int:
        with self.cond:
            return sum(len(d.records) for d in self._ready)

    def peers_seen(self) -> int:
        with self.cond:
            return len(self._peers)

    def known_peers(self) -> list[str]:
        """Peers with a valid announcement younger than max_age_s, most recently active first."""
        with self.cond:
            return sorted(self._peers, key=lambda p: -self._peers[p])

    def addrs_of(self, peer: str) -> list[str]:
        """The addresses `peer` named in its newest valid announcement (may be empty)."""
        with self.cond:
            return self._addrs.get(peer, "").split()

    def take(self, min_records: int, timeout: float, stopped: threading.Event | None = None) -> Delivery:
        """Everything delivered since the last call; waits (≤ timeout) only while fewer than `min_records` are ready."""
        started = time.monotonic()
        deadline = started + max(0.0, timeout)
        with self.cond:
            while sum(len(d.records) for d in self._ready) < min_records and not (stopped and stopped.is_set()):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(min(left, 0.5))
            ready, self._ready = self._ready, []
            drops, self._drops = self._drops, Counter()
            skipped, self._skipped = self._skipped, 0
            nbytes, self._bytes = self._bytes, 0
            return Delivery(records=[r for d in ready for r in d.records], drops=drops,
                            peers=list(dict.fromkeys(d.peer for d in ready)), peers_seen=len(self._peers),
                            skipped=skipped, bytes=nbytes, waited_s=time.monotonic() - started)
