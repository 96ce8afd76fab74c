"""The receive rules every transport shares, as pure functions: the receiver's limits, our own bundle and
its announcement, vetting an announcement before any byte is fetched, and opening a fetched bundle
(docs/PROTOCOL.md §5–7; swarm.exchange.transport describes the exchange, swarm.exchange.inbox keeps its book).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from protocols.announce import decode_announcement, encode_announcement
from protocols.codec import (
    DEFAULT_CAPS,
    Caps,
    RecordError,
    decode_bundle,
    encode_bundle,
    sha256_hex,
)
from protocols.keys import WINDOW_S, shard_of, window_of
from protocols.records import Announcement, RolloutRecord

if TYPE_CHECKING:
    from swarm.config import SwarmConfig

MAX_CANDIDATES_PER_PEER = 4  # a peer's newest valid announcements kept waiting for a fetch slot
BUNDLE_COMPLETIONS = 256  # completions at the receiver's budget one bundle may hold (32 groups of 8)


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
    standing: dict[str, int] = field(default_factory=dict)  # peers seen by state: good / new / backoff (swarm.exchange.standing)
    backed_off: dict[str, str] = field(default_factory=dict)  # a few backed-off peers → the cause of their last failure
    # what the transport refused since the last take: streams not admitted ("<protocol>:<why>"), bundles declined to
    # a requester that had them ("served:repeat"), announced addresses not dialled ("dial:<scope|waiting|rate>")
    refused: Counter = field(default_factory=Counter)
    # how announcements travel (swarm.exchange.gossip.GossipReport): {"transport": "gossip" | "dht", …}; {} in memory
    announce: dict = field(default_factory=dict)


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
    good_for_s: float = 120.0  # a peer whose last bundle we used came within this long is waited for (swarm.exchange.standing)
    backoff_s: float = 10.0  # a peer's first failure backs it off this long, doubling per further one
    max_peers: int = 4096  # peers tracked (seen, judged); identities are free, so the books are bounded
    # the receiver's own budget per completion (its ingest.max_completion_tokens or generation.max_new_tokens;
    # set by the node): longer completions are dropped at decode, and a bundle's tokens and bytes are bounded
    # by what BUNDLE_COMPLETIONS such completions hold (decode_caps). None: the wire caps alone
    completion_tokens: int | None = None
    max_pending_bytes: int = 32 << 20  # decoded records waiting for the node's next round, all peers together

    @classmethod
    def of(cls, cfg: SwarmConfig) -> Limits:
        """The receive limits and fan-in budget a node's swarm config asks the transports to enforce."""
        return cls(caps=cfg.caps.to_caps(), max_records_per_peer_window=cfg.max_records_per_peer_window,
                   max_bytes_per_peer_window=cfg.max_bytes_per_peer_window, max_age_s=cfg.max_age_s,
                   max_clock_skew_s=cfg.max_clock_skew_s, window_s=cfg.window_s, shards=cfg.shards,
                   max_fetches_per_window=cfg.max_fetches_per_window, good_for_s=cfg.good_for_s,
                   backoff_s=cfg.backoff_s, max_peers=cfg.max_peers, max_pending_bytes=cfg.max_pending_bytes)

    def pending_cap(self) -> int:
        """Bytes of decoded records that may wait for the node: max_pending_bytes, or one bundle at the decode caps
        if that is larger (a bundle the caps admit is never refused for its size alone)."""
        caps = self.decode_caps()
        return max(self.max_pending_bytes, 76 * caps.max_bundle_tokens + 4 * caps.max_decompressed_bytes)

    def decode_caps(self) -> Caps:
        """The caps a bundle is decoded under: the wire caps, tightened to the receiver's own budget."""
        if self.completion_tokens is None:
            return self.caps
        tokens = min(self.caps.max_bundle_tokens, BUNDLE_COMPLETIONS * self.completion_tokens)
        return replace(self.caps, max_bundle_tokens=tokens,
                       max_decompressed_bytes=min(self.caps.max_decompressed_bytes, max(1 << 20, 64 * tokens)))


def make_bundle(peer: str, records: list[RolloutRecord], now: float | None = None,
                window_s: float = WINDOW_S, addrs: str = "", level: int = -1) -> tuple[bytes, bytes, Announcement]:
    """(bundle bytes, announcement bytes, announcement) for our own records; `addrs`: our dial hint; `level`: the
    announcement-shard level we gossip at (-1: none named)."""
    now = time.time() if now is None else now
    data = encode_bundle(records)
    version = max((r.policy_version for r in records), default=0)
    ann = Announcement(peer=peer, window=window_of(now, window_s), count=len(records), nbytes=len(data),
                       sha256=sha256_hex(data), policy_version=version, created_at=now, addrs=addrs, level=level)
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
    records, drops = decode_bundle(data, limits.decode_caps(), limits.completion_tokens)
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


def decoded_bytes(records: list[RolloutRecord]) -> int:
    """What decoded records hold in memory, from above: ~68 bytes per token (an int and a float object and
    their tuple slots, token_bytes included), 4 per character of text (CPython's widest strings), and a
    fixed cost per record and completion. The inbox bounds undelivered records by it (Limits.max_pending_bytes)."""
    total = 0
    for rec in records:
        total += 1024 + 4 * len(rec.prompt)
        for c in rec.completions:
            total += 256 + 76 * len(c.token_ids) + 4 * len(c.text)
    return total
