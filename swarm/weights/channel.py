"""Weight broadcast from a learner to its samplers: the channel interface, the follower's rules, the in-memory twin
(docs/ARCHITECTURE.md §12, docs/PROTOCOL.md §10).

    learner:  publish(version, bytes, format) → serve the bytes (its newest `keep` versions) and store a signed
              announcement {version, sha256, nbytes, format, created_at} under "{swarm}/weights/{own peer id}"
    sampler:  follows only the learner peer ids it is configured with: reads their keys every poll, vets each
              announcement (WeightBook.offer), fetches the newest new one (one fetch at a time), checks size and
              digest (WeightBook.settle); take() hands the newest verified weights to the node once

Follower rules (every channel runs them; unit tests on the twin cover the real one):
- only a value signed by the learner the key names counts (`forged` otherwise), decoded as version 2
  (`bad_announcement`, `version`), in the follower's format (`format`: a full-weights sampler never loads an
  adapter), within the size cap (`too_large`) and not from the future beyond the clock skew (`future_timestamp`)
  — all before a byte is fetched; a value is vetted once, however often it is read (one from the future
  again once the clock skew no longer excludes it);
- it is fetched when it is newer (created_at) than what the follower holds, is fetching or has ready — each
  of those dated no later than when the follower first saw it (and a fetched one replaces the one waiting
  for the node only when it is newer by that same dating), so one announcement from a learner whose
  clock was fast does not outrank the ones it makes after its clock is put right — and
  names other bytes than those it holds (the same bytes under another version only relabel them: a step
  with a zero gradient changes the version, not the weights); a learner that restarts from an older
  checkpoint announces a lower version with a newer time and is followed;
- the fetched bytes must be exactly `nbytes` long and hash to `sha256` (`digest_mismatch`); a failed fetch
  (`fetch_failed`) is retried after `retry_s`, counted each time.
Drops are counted by reason and handed out with take_drops(); nothing here raises on peer data.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import Counter
from dataclasses import dataclass
from typing import Protocol

from protocols.codec import RecordError, sha256_hex
from protocols.weights import (
    WeightAnnouncement,
    decode_weight_announcement,
    encode_weight_announcement,
    weights_key,
)


@dataclass(frozen=True)
class WeightLimits:
    """What a follower accepts."""

    max_bytes: int = 2 << 30  # largest weight file fetched (checked against the announcement before fetching)
    max_clock_skew_s: float = 120.0  # tolerated future created_at
    retry_s: float = 10.0  # a failed fetch of the same weights is tried again after this long


@dataclass(frozen=True)
class WeightUpdate:
    """Verified weights, ready to load."""

    learner: str
    version: int
    sha256: str
    format: str
    data: bytes
    created_at: float  # the learner's publish time
    ready_at: float  # our time when the bytes were verified
    relabel: bool = False  # the weights we already hold, under a new version (data is empty)

    @property
    def latency_s(self) -> float:
        """Publish → verified here (two clocks: meaningful within their skew)."""
        return self.ready_at - self.created_at


class WeightChannel(Protocol):
    peer_id: str

    def publish(self, version: int, data: bytes, fmt: str) -> WeightAnnouncement: ...

    def take(self) -> WeightUpdate | None: ...  # newest verified weights not handed out yet

    def take_drops(self) -> Counter: ...  # drops by reason since the last call

    def close(self) -> None: ...


def make_weight_announcement(peer: str, version: int, data: bytes, fmt: str,
                             now: float | None = None) -> tuple[WeightAnnouncement, bytes]:
    ann = WeightAnnouncement(peer=peer, version=version, sha256=sha256_hex(data), nbytes=len(data), format=fmt,
                             created_at=time.time() if now is None else now)
    return ann, encode_weight_announcement(ann)


_MAX_VETTED = 256  # signers whose last value is remembered


class WeightBook:
    """The follower's state and rules (module docstring); thread-safe."""

    def __init__(self, learners: list[str], fmt: str, limits: WeightLimits):
        self.learners, self.fmt, self.limits = frozenset(learners), fmt, limits
        self._lock = threading.Lock()
        # signer → (last value, its verdict, when to vet that value again: a future-dated one, once it is not)
        self._vetted: dict[str, tuple[bytes, WeightAnnouncement | None, float]] = {}
        self._held: WeightAnnouncement | None = None  # handed to the node by take()
        self._ready: WeightUpdate | None = None
        self._pending: WeightAnnouncement | None = None  # a fetch in flight
        self._failed: dict[tuple[str, float], float] = {}  # (sha256, created_at) → when its last fetch failed
        self._first_seen: dict[tuple[str, float], float] = {}  # (sha256, created_at) → when we first vetted it
        self._drops: Counter = Counter()

    def _newest(self) -> float:
        """The newest of what we hold, fetch or have ready, each dated no later than when we first saw it: an
        announcement dated ahead of our clock (the learner's clock was fast) must not outrank those the
        learner makes once its clock is right."""
        dated = [(a.sha256, a.created_at) for a in (self._held, self._pending) if a is not None]
        if self._ready is not None:
            dated.append((self._ready.sha256, self._ready.created_at))
        return max((self._dated(sha, t) for sha, t in dated), default=float("-inf"))

    def _dated(self, sha256: str, created_at: float) -> float:
        """An announcement's time, no later than when we first saw it (caller holds the lock)."""
        return min(created_at, self._first_seen.get((sha256, created_at), created_at))

    def offer(self, key_learner: str, signer: str | None, value: object, now: float) -> WeightAnnouncement | None:
        """Vet a value read under `key_learner`'s key; returns the announcement to fetch now, if any."""
        if key_learner not in self.learners:
            return None  # we never read such a key; a push from a peer we do not follow is ignored
        marker = value if isinstance(value, bytes) else repr(value)[:256].encode()
        with self._lock:
            if len(self._vetted) > _MAX_VETTED:  # many forging signers: forget them (their values are re-counted)
                self._vetted = {k: v for k, v in self._vetted.items() if k in self.learners}
            if signer != key_learner:
                slot = f"forged:{signer}"
                if self._vetted.get(slot, (None,))[0] != marker:
                    self._vetted[slot] = (marker, None, float("inf"))
                    self._drops["forged"] += 1
                return None
            known = self._vetted.get(signer)
            if known is None or known[0] != marker or now >= known[2]:
                ann, again_at = self._vet(signer, value, now)
                self._vetted[signer] = (marker, ann, again_at)
            else:
                ann = known[1]
            if ann is None or self._pending is not None or ann.created_at <= self._newest():
                return None
            if self._held is not None and ann.sha256 == self._held.sha256:  # the bytes we hold: nothing to fetch
                if ann.version != self._held.version:  # a step that left the weights as they were: new label
                    self._ready = WeightUpdate(ann.peer, ann.version, ann.sha256, ann.format, b"", ann.created_at,
                                               now, relabel=True)
                self._held = ann
                return None
            failed = self._failed.get((ann.sha256, ann.created_at))  # a re-announcement is tried at once
            if failed is not None and now - failed < self.limits.retry_s:
                return None
            self._pending = ann
            return ann

    def _vet(self, signer: str, value: object, now: float) -> tuple[WeightAnnouncement | None, float]:
        """(the announcement, or None when dropped; when to vet the same value again: a value from the future is
        vetted again once the clock skew no longer excludes it, every other verdict is final)."""
        try:
            ann = decode_weight_announcement(value)
        except RecordError as exc:
            self._drops[exc.reason] += 1
            return None, float("inf")
        reason = None
        if ann.peer != signer:
            reason = "forged"
        elif ann.format != self.fmt:
            reason = "format"
        elif ann.nbytes > self.limits.max_bytes:
            reason = "too_large"
        elif ann.created_at - now > self.limits.max_clock_skew_s:
            reason = "future_timestamp"
        if reason:
            self._drops[reason] += 1
            return None, (ann.created_at - self.limits.max_clock_skew_s if reason == "future_timestamp"
                          else float("inf"))
        if len(self._first_seen) >= 64:
            self._first_seen = dict(list(self._first_seen.items())[32:])
        self._first_seen.setdefault((ann.sha256, ann.created_at), now)
        return ann, float("inf")

    def settle(self, ann: WeightAnnouncement, data: bytes | None, reason: str = "fetch_failed",
               now: float | None = None) -> bool:
        """File the outcome of fetching `ann` (data None: failed with `reason`). True when the bytes are ready."""
        now = time.time() if now is None else now
        with self._lock:
            if self._pending == ann:
                self._pending = None
            if data is not None and (len(data) != ann.nbytes or sha256_hex(data) != ann.sha256):
                data, reason = None, "digest_mismatch"
            if data is None:
                if len(self._failed) > 64:
                    self._failed = {k: t for k, t in self._failed.items() if now - t < self.limits.retry_s}
                self._failed[(ann.sha256, ann.created_at)] = now
                self._drops[reason] += 1
                return False
            self._failed.pop((ann.sha256, ann.created_at), None)
            if self._ready is None or (self._dated(ann.sha256, ann.created_at)
                                       > self._dated(self._ready.sha256, self._ready.created_at)):
                self._ready = WeightUpdate(ann.peer, ann.version, ann.sha256, ann.format, data, ann.created_at, now)
            return True

    def take(self) -> WeightUpdate | None:
        with self._lock:
            ready, self._ready = self._ready, None
            if ready is not None:
                self._held = WeightAnnouncement(ready.learner, ready.version, ready.sha256, len(ready.data),
                                                ready.format, ready.created_at)
            return ready

    def take_drops(self) -> Counter:
        with self._lock:
            drops, self._drops = self._drops, Counter()
            return drops


class InMemoryWeightHub:
    """Stand-in for the learners' DHT keys and served bytes (one per InMemoryHub, or standalone in tests)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, dict[str | None, bytes]] = {}  # key → signer → value
        self._blobs: dict[tuple[str, str], bytes] = {}
        self._gone: set[str] = set()

    def store(self, key: str, signer: str | None, value: bytes) -> None:
        with self._lock:
            self._values.setdefault(key, {})[signer] = value

    def read(self, key: str) -> dict[str | None, bytes]:
        with self._lock:
            return dict(self._values.get(key, {}))

    def serve(self, peer: str, sha256: str, data: bytes, keep: int) -> None:
        with self._lock:
            self._gone.discard(peer)
            self._blobs[(peer, sha256)] = data
            mine = [k for k in self._blobs if k[0] == peer]
            for k in mine[:-keep]:
                del self._blobs[k]

    def fetch(self, peer: str, sha256: str) -> bytes | None:
        with self._lock:
            return None if peer in self._gone else self._blobs.get((peer, sha256))

    def disconnect(self, peer: str) -> None:
        """The learner is gone: its announcement stays (as in the DHT until expiry), its bytes do not."""
        with self._lock:
            self._gone.add(peer)


_HUBS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def weight_hub_of(hub: object) -> InMemoryWeightHub:
    """The weight hub that goes with an InMemoryHub (created on first use)."""
    if hub not in _HUBS:
        _HUBS[hub] = InMemoryWeightHub()
    return _HUBS[hub]


class InMemoryWeights:
    """WeightChannel over an InMemoryWeightHub with the follower rules of WeightBook; take() polls and fetches."""

    def __init__(self, hub: InMemoryWeightHub, peer_id: str, swarm_id: str = "rlswarm", *,
                 follow: list[str] = (), fmt: str = "full", limits: WeightLimits | None = None, keep: int = 2):
        self.hub, self.peer_id, self.swarm_id, self.keep = hub, peer_id, swarm_id, keep
        self.follow = list(follow)
        self.book = WeightBook(self.follow, fmt, limits or WeightLimits())

    def publish(self, version: int, data: bytes, fmt: str) -> WeightAnnouncement:
        ann, value = make_weight_announcement(self.peer_id, version, data, fmt)
        self.hub.serve(self.peer_id, ann.sha256, data, self.keep)
        self.hub.store(weights_key(self.swarm_id, self.peer_id), self.peer_id, value)
        return ann

    def poll(self) -> None:
        now = time.time()
        for learner in self.follow:
            for signer, value in self.hub.read(weights_key(self.swarm_id, learner)).items():
                ann = self.book.offer(learner, signer, value, now)
                if ann is not None:
                    self.book.settle(ann, self.hub.fetch(ann.peer, ann.sha256))

    def take(self) -> WeightUpdate | None:
        self.poll()
        return self.book.take()

    def take_drops(self) -> Counter:
        return self.book.take_drops()

    def close(self) -> None:
        self.hub.disconnect(self.peer_id)
