"""Where announcements live in the DHT: swarm-time windows and shards (docs/PROTOCOL.md §5).

Peers exchange by *swarm time*, not by round: a bundle published at time t (the publisher's
clock, which hivemind's `get_dht_time()` also reads) is announced under the key of its window

    window = ⌊t / window_s⌋
    shard  = int.from_bytes(sha256(peer_id)[:8], "big") mod shards
    key    = "{swarm}/rollouts/w{window}/s{shard}"

so a node that joins late, restarts or runs 100× slower reads the windows of the last
`max_age_s` seconds and finds whatever its peers published then, whatever their round counters
say. Shards spread one window's announcements over `shards` keys, so no key is hot when
thousands of peers announce; a reader reads all of them (small swarms) or a random subset.
`window_s` and `shards` are swarm-wide parameters, like the swarm id: peers that disagree on
them do not see each other.

Announcements gossiped over libp2p pubsub (swarm.net.pubsub) travel on announcement shards
(docs/PROTOCOL.md §5): at level k there are 2^k shards, a peer's shard at level k is

    ann_shard = int.from_bytes(sha256(peer_id)[:8], "big") mod 2^k      (= shard_of(peer_id, 2^k))
    topic     = "{swarm}/ann/v{version}/{k}/{ann_shard}"                   (`ann_topic`)

so the levels nest: shard s of level k is shards s and s + 2^k of level k + 1, and two peers whose
levels differ by one still share the topic of the lower level. The level a peer uses follows from
the swarm's estimated size (`ann_level`: shards of about `per_shard` peers). The previous version's
one topic per swarm and protocol version, `{swarm}/announce/v{version}` (`announce_topic`), stays
for peers of that version (the legacy topic).
"""

from __future__ import annotations

import hashlib
import math

WINDOW_S = 10.0  # default window length, seconds
SHARDS = 4  # default shards per window


def window_of(t: float, window_s: float = WINDOW_S) -> int:
    """The window that time `t` (unix seconds) falls in."""
    return int(math.floor(t / window_s))


def shard_of(peer_id: str, shards: int = SHARDS) -> int:
    """The shard a peer announces under: the first 8 bytes of sha256(peer id), big-endian, mod shards."""
    return int.from_bytes(hashlib.sha256(peer_id.encode()).digest()[:8], "big") % shards


def rollouts_key(swarm: str, window: int, shard: int) -> str:
    """The DHT key of one shard of one window's announcements."""
    return f"{swarm}/rollouts/w{window}/s{shard}"


def announce_topic(swarm: str, version: int) -> str:
    """The legacy gossipsub topic: all of one swarm's announcements under one protocol version (the previous
    version's only topic; swarm.net.pubsub)."""
    return f"{swarm}/announce/v{version}"


MAX_ANN_LEVEL = 16  # at most 65,536 announcement shards


def ann_shard(peer_id: str, level: int) -> int:
    """A peer's announcement shard at `level` (2^level shards): shard_of(peer_id, 2^level), so the levels nest."""
    return shard_of(peer_id, 1 << level)


def ann_topic(swarm: str, version: int, level: int, shard: int) -> str:
    """The gossipsub topic of announcement shard `shard` of `level`."""
    return f"{swarm}/ann/v{version}/{level}/{shard}"


def ann_level(peers: float, per_shard: int) -> float:
    """The real-valued level at which shards hold about `per_shard` of `peers`: log2(peers / per_shard), at least 0
    and at most MAX_ANN_LEVEL (a caller rounds it, with hysteresis: swarm.exchange.shards)."""
    if peers <= per_shard:
        return 0.0
    return min(float(MAX_ANN_LEVEL), math.log2(peers / per_shard))


def windows_back(now_window: int, max_age_s: float, window_s: float = WINDOW_S) -> list[int]:
    """The windows a bundle younger than `max_age_s` can have been announced in, newest first."""
    span = int(math.ceil(max_age_s / window_s))
    return [now_window - i for i in range(span + 1) if now_window - i >= 0]
