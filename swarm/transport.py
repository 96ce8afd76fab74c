"""The transport interface the node calls, the receive-side rules every transport shares, and an
in-memory twin for unit tests in swarm.memory (docs/ARCHITECTURE.md §5, docs/PROTOCOL.md).

A round's exchange, as seen by one node:

    publish(r, records)  → encode one bundle, serve its bytes, announce {count, nbytes, sha256}
                           under key "{swarm}/rollouts/{r}" with a subkey only this peer can sign
    gather([r, …], T, k) → for each other peer's announcement of a requested round: vet it, fetch
                           the bytes, check the digest, decode, filter; wait at most T seconds,
                           or less once k other peers' bundles are *settled* (fetched or dropped)
                           for every requested round

Receive-side rules (identical for every transport, so unit tests on the twin cover them):

- each bundle is handed out once: dedupe by (peer, round, sha256);
- an announcement is vetted before any byte is fetched: the signer's peer id must equal the
  announced peer (``forged``), its round the key's round, its size within ``caps`` (``too_large``,
  ``too_many_records``) and within the per-peer-per-round quota (``quota``, cumulative over
  re-announcements);
- after the fetch: digest (``digest_mismatch``), bundle decode (codec reasons), then per record:
  ``peer`` must be the signer (``forged``), ``swarm`` ours (``wrong_swarm``), ``round`` the
  announced one (``wrong_round``).

Bundle-level reasons count one per bundle; record-level reasons count one per record. Nothing
here ever raises on peer data.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
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
from protocols.records import Announcement, RolloutRecord


@dataclass
class GatherResult:
    """What one ``gather`` call returns.

    records: other peers' records not returned before; drops: reason → count for the requested
    rounds (each drop reported once); peers: peer ids whose bundles were handed out in this call;
    latency_s: seconds from the call until the last of those bundles had settled (0 when they had
    settled before the call), None when no bundle was handed out.
    """

    records: list[RolloutRecord]
    drops: Counter[str]
    peers: list[str]
    latency_s: float | None


class Transport(Protocol):
    peer_id: str

    def publish(self, round: int, records: list[RolloutRecord]) -> int: ...  # wire bytes published

    def gather(self, rounds: list[int], timeout: float, min_peers: int | None) -> GatherResult: ...

    def shutdown(self) -> None: ...


def rollouts_key(swarm_id: str, round_: int) -> str:
    """The DHT key of one round's announcements."""
    return f"{swarm_id}/rollouts/{round_}"


@dataclass(frozen=True)
class Limits:
    """What a receiver accepts: codec caps plus the per-peer-per-round quotas."""

    caps: Caps = DEFAULT_CAPS
    max_records_per_peer_round: int = 256
    max_bytes_per_peer_round: int = 16 << 20


def make_bundle(peer: str, round_: int, records: list[RolloutRecord], policy_version: int | None = None
                ) -> tuple[bytes, bytes, Announcement]:
    """(bundle bytes, announcement bytes, announcement) for our own records of one round."""
    data = encode_bundle(records)
    version = policy_version if policy_version is not None else max((r.policy_version for r in records), default=0)
    ann = Announcement(peer=peer, round=round_, count=len(records), nbytes=len(data), sha256=sha256_hex(data),
                       policy_version=version, created_at=time.time())
    return data, encode_announcement(ann), ann


def vet_announcement(value: object, signer: str | None, round_: int, limits: Limits) -> Announcement:
    """The announcement ``value`` signed by ``signer`` under round ``round_``'s key, or RecordError(reason).

    ``signer`` is the peer id bound to the signed subkey (None: not an owner subkey, i.e. unsigned).
    """
    if signer is None:
        raise RecordError("forged", "announcement under a subkey that is not an [owner:<key>] marker")
    ann = decode_announcement(value)
    if ann.peer != signer:
        raise RecordError("forged", f"announcement names peer {ann.peer[:16]!r}, signed by {signer[:16]!r}")
    if ann.round != round_:
        raise RecordError("bad_announcement", f"announces round {ann.round} under round {round_}'s key")
    if ann.nbytes > limits.caps.max_compressed_bytes:
        raise RecordError("too_large", f"{ann.nbytes} bytes > cap {limits.caps.max_compressed_bytes}")
    if ann.count > limits.caps.max_records:
        raise RecordError("too_many_records", f"{ann.count} records > cap {limits.caps.max_records}")
    if ann.count > limits.max_records_per_peer_round or ann.nbytes > limits.max_bytes_per_peer_round:
        raise RecordError("quota", f"{ann.count} records / {ann.nbytes} bytes over the per-peer round quota")
    return ann


def open_bundle(data: bytes, ann: Announcement, swarm_id: str, limits: Limits) -> tuple[list[RolloutRecord], Counter]:
    """Verified bytes of an announced bundle → (accepted records, record-level drops).

    Raises RecordError(reason) when the bundle as a whole is refused.
    """
    if len(data) != ann.nbytes or sha256_hex(data) != ann.sha256:
        raise RecordError("digest_mismatch", "bundle bytes differ from the announcement")
    records, drops = decode_bundle(data, limits.caps)
    if len(records) + sum(drops.values()) > limits.max_records_per_peer_round:
        raise RecordError("quota", "more records than the per-peer round quota")
    kept = []
    for rec in records:
        if rec.peer != ann.peer:
            drops["forged"] += 1
        elif rec.swarm != swarm_id:
            drops["wrong_swarm"] += 1
        elif rec.round != ann.round:
            drops["wrong_round"] += 1
        else:
            kept.append(rec)
    return kept, drops


@dataclass
class _Settled:
    peer: str
    records: list[RolloutRecord]
    at: float  # time.monotonic() when it settled


@dataclass
class Inbox:
    """Thread-safe book of other peers' bundles per round: settled, not yet handed out, drops.

    Writers (a fetch finishing, a drop) call ``settle``/``drop``; the synchronous ``gather`` calls
    ``wait_until`` then ``take``. Each bundle key (peer, round, sha256) is claimed once, so it is
    fetched, counted and handed out at most once.
    """

    cond: threading.Condition = field(default_factory=threading.Condition)
    claimed: set = field(default_factory=set)
    ready: dict[int, list[_Settled]] = field(default_factory=dict)
    drops: dict[int, Counter] = field(default_factory=dict)
    settled_peers: dict[int, set[str]] = field(default_factory=dict)
    used: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)  # (peer, round) → (records, bytes)

    def claim(self, key: tuple) -> bool:
        """True the first time ``key`` is seen (the caller then owns processing it)."""
        with self.cond:
            if key in self.claimed:
                return False
            self.claimed.add(key)
            return True

    def reserve(self, ann: Announcement, limits: Limits) -> bool:
        """Book the announced size against the peer's round quota; False when it would exceed it."""
        with self.cond:
            n, b = self.used.get((ann.peer, ann.round), (0, 0))
            n, b = n + ann.count, b + ann.nbytes
            if n > limits.max_records_per_peer_round or b > limits.max_bytes_per_peer_round:
                return False
            self.used[(ann.peer, ann.round)] = (n, b)
            return True

    def settle(self, round_: int, peer: str | None, records: list[RolloutRecord], drops: Counter) -> None:
        """A bundle of ``peer`` for ``round_`` is done (``peer`` None: nobody to attribute it to)."""
        with self.cond:
            if drops:
                self.drops.setdefault(round_, Counter()).update(drops)
            if peer is not None:
                self.settled_peers.setdefault(round_, set()).add(peer)
                if records:
                    self.ready.setdefault(round_, []).append(_Settled(peer, records, time.monotonic()))
            self.cond.notify_all()

    def drop(self, round_: int, peer: str | None, reason: str) -> None:
        self.settle(round_, peer, [], Counter({reason: 1}))

    def enough(self, rounds: list[int], min_peers: int | None, watch_rounds: int) -> bool:
        """Whether ``min_peers`` other peers (None: every peer settled in the last ``watch_rounds``
        rounds, or at least one when none has been seen) have settled bundles in every round."""
        with self.cond:  # re-entrant
            return self._enough(rounds, min_peers, watch_rounds)

    def _enough(self, rounds: list[int], min_peers: int | None, watch_rounds: int) -> bool:
        if min_peers is None:
            lo = min(rounds) - watch_rounds
            known = set().union(*(p for r, p in self.settled_peers.items() if lo <= r <= max(rounds)))
            if not known:  # nobody seen yet: wait for the first peer of each round
                return all(self.settled_peers.get(r) for r in rounds)
            return all(known <= self.settled_peers.get(r, set()) for r in rounds)
        return all(len(self.settled_peers.get(r, ())) >= min_peers for r in rounds)

    def wait_until(self, rounds: list[int], min_peers: int | None, timeout: float, watch_rounds: int,
                   stopped: threading.Event | None = None) -> None:
        """Block until enough peers settled for every round, ``timeout`` passed, or ``stopped`` is set."""
        deadline = time.monotonic() + max(0.0, timeout)
        with self.cond:
            while not self._enough(rounds, min_peers, watch_rounds) and not (stopped and stopped.is_set()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self.cond.wait(min(left, 0.5))  # wakes at least every 0.5 s to see `stopped`

    def take(self, rounds: list[int], started: float) -> GatherResult:
        """Hand out (once) the settled records and drops of ``rounds``."""
        records, peers, drops, last = [], [], Counter(), None
        with self.cond:
            for r in dict.fromkeys(rounds):
                for s in self.ready.pop(r, []):
                    records.extend(s.records)
                    peers.append(s.peer)
                    last = max(last or s.at, s.at)
                drops.update(self.drops.pop(r, Counter()))
        latency = None if last is None else max(0.0, last - started)
        return GatherResult(records, drops, list(dict.fromkeys(peers)), latency)

    def forget_before(self, round_: int) -> None:
        """Drop bookkeeping of rounds older than ``round_`` (bounded memory over long runs)."""
        with self.cond:
            self.claimed = {k for k in self.claimed if k[1] >= round_}
            for book in (self.ready, self.drops, self.settled_peers):
                for r in [r for r in book if r < round_]:
                    del book[r]
            self.used = {k: v for k, v in self.used.items() if k[1] >= round_}


def process_announcement(inbox: Inbox, *, round_: int, subkey_peer: str | None, value: object,
                         limits: Limits) -> Announcement | None:
    """Vet one (subkey, value) of round ``round_``; returns the announcement to fetch, or None.

    None means: already seen, or dropped and counted in ``inbox`` (the peer's round settles).
    """
    if not inbox.claim(("ann", round_, subkey_peer, value if isinstance(value, bytes) else repr(value))):
        return None
    try:
        ann = vet_announcement(value, subkey_peer, round_, limits)
    except RecordError as exc:
        inbox.drop(round_, subkey_peer, exc.reason)
        return None
    if not inbox.claim(("bundle", round_, ann.peer, ann.sha256)):
        return None
    if not inbox.reserve(ann, limits):
        inbox.drop(round_, ann.peer, "quota")
        return None
    return ann


def settle_fetched(inbox: Inbox, ann: Announcement, data: bytes | None, swarm_id: str, limits: Limits,
                   fail_reason: str = "fetch_failed") -> None:
    """Decode and file a fetched bundle (``data`` None: the fetch failed with ``fail_reason``)."""
    if data is None:
        inbox.drop(ann.round, ann.peer, fail_reason)
        return
    try:
        records, drops = open_bundle(data, ann, swarm_id, limits)
    except RecordError as exc:
        inbox.drop(ann.round, ann.peer, exc.reason)
        return
    inbox.settle(ann.round, ann.peer, records, drops)
