"""Which gossip topics a peer subscribes to and publishes on: announcement shards (docs/PROTOCOL.md §5).

One topic for a whole swarm makes every peer carry every announcement (≈ 6 copies of each: docs/benchmarks/scale.md §16C),
so per-peer traffic grows with the swarm. Here announcements travel on shards sized to the swarm (protocols.keys):

    level      k = round(log2(estimated peers / `gossip_shard_peers`)), at least 0 (2^k shards of about
               `gossip_shard_peers` peers each); the estimate is the swarm's size seen from the DHT (the
               median of the last ESTIMATES estimates), and the level moves only when the estimate's real level
               is more than HYSTERESIS from it, so that estimates that wobble do not resubscribe a peer every
               check; `gossip_shard_level` fixes it instead
    home       the peer's own shard at its level, derived from its id (protocols.keys.ann_shard): where it
               publishes, and subscribes
    nesting    it also subscribes to its own shards one level below and one above, so that a peer whose
               estimate is half or twice ours (one level apart) still shares a topic with us: theirs is ours
               at their level, and the levels nest
    extra      `gossip_extra_shards` more shards of its level, derived from its id and the time, each replaced by
               another every `gossip_rotate_s` (at a moment of the peer's own, so peers do not all move at once):
               over time a peer hears peers of other shards too, not only of its own
    legacy     the previous version's one topic (protocols.keys.announce_topic): always subscribed to, so
               peers of that version are heard; published on only while such a peer has been heard there within
               LEGACY_QUIET_S (a message without `level`: our version names its level in every announcement), so
               that they hear us. With `gossip_shards` off a peer behaves as the previous version: the legacy
               topic alone, no `level`.

A peer thus subscribes to at most 4 + `gossip_extra_shards` topics and carries about (1 + extra) × `gossip_shard_peers`
announcements a round, whatever the swarm's size (plus the few of peers one level off, and of previous-version peers).
Nothing is negotiated: peers that disagree on the level by one still meet, by two or more they meet only on the DHT
and by pushes (swarm.exchange.poller reads the DHT for peers that gossip does not bring). Pure bookkeeping on a
clock the caller passes; swarm.exchange.gossip subscribes and publishes.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections import deque

from protocols.keys import MAX_ANN_LEVEL, ann_level, ann_shard, ann_topic, announce_topic

LEGACY_QUIET_S = 600.0  # we publish on the legacy topic while a previous-version peer was heard there this recently
HYSTERESIS = 0.75  # the level moves when the estimate's real level is further than this from it
ESTIMATES = 5  # the level follows the median of this many estimates


class ShardPlan:
    """The topics of one peer (module docstring); `estimate(peers)` as the swarm's size is learnt."""

    def __init__(self, peer_id: str, swarm_id: str, version: int, *, per_shard: int = 32, extra: int = 1,
                 rotate_s: float = 600.0, fixed_level: int | None = None, sharded: bool = True):
        self.peer_id, self.swarm_id, self.version = peer_id, swarm_id, version
        self.per_shard, self.extra, self.rotate_s = per_shard, extra, rotate_s
        self.fixed_level, self.sharded = fixed_level, sharded
        self.level = fixed_level if fixed_level is not None else 0
        self.legacy = announce_topic(swarm_id, version)
        self.legacy_heard: float | None = None  # when a previous-version peer was last heard on the legacy topic
        self._estimates: deque[float] = deque(maxlen=ESTIMATES)
        digest = hashlib.sha256(peer_id.encode()).digest()
        self._phase = int.from_bytes(digest[8:16], "big") % max(1, int(rotate_s))  # our own moment of rotation

    def estimate(self, peers: float) -> bool:
        """Take one estimate of the swarm's size; True when the level changed."""
        if self.fixed_level is not None or not self.sharded or not peers > 0:
            return False
        self._estimates.append(float(peers))
        real = ann_level(statistics.median(self._estimates), self.per_shard)
        if abs(real - self.level) <= HYSTERESIS:
            return False
        self.level = max(0, min(MAX_ANN_LEVEL, round(real)))
        return True

    def topic(self, level: int, shard: int | None = None) -> str:
        """Our shard's topic at `level` (or that of `shard`)."""
        return ann_topic(self.swarm_id, self.version, level,
                         ann_shard(self.peer_id, level) if shard is None else shard)

    @property
    def home(self) -> str:
        return self.topic(self.level)

    def extras(self, now: float) -> list[str]:
        """The rotating shards of our level at `now` (none at level 0: one shard)."""
        shards = 1 << self.level
        home = ann_shard(self.peer_id, self.level)
        out: list[str] = []
        for j in range(self.extra if shards > 1 else 0):
            epoch = math.floor((now + self._phase) / self.rotate_s)
            digest = hashlib.sha256(f"{self.peer_id}/{epoch}/{j}".encode()).digest()
            shard = int.from_bytes(digest[:8], "big") % shards
            if shard == home:
                shard = (shard + 1) % shards
            topic = self.topic(self.level, shard)
            if topic not in out:
                out.append(topic)
        return out

    def subscriptions(self, now: float) -> list[str]:
        """Every topic to be subscribed to at `now`: the legacy one, our shard one level below, at and one above
        our level, and the extras."""
        if not self.sharded:
            return [self.legacy]
        levels = [k for k in (self.level - 1, self.level, self.level + 1) if 0 <= k <= MAX_ANN_LEVEL]
        return [self.legacy, *(self.topic(k) for k in levels), *self.extras(now)]

    def publish_topics(self, now: float) -> list[str]:
        """Where our announcements go at `now`: our home shard, and the legacy topic while a previous-version peer
        was heard there within LEGACY_QUIET_S (module docstring)."""
        if not self.sharded:
            return [self.legacy]
        heard = self.legacy_heard is not None and now - self.legacy_heard <= LEGACY_QUIET_S
        return [self.home, self.legacy] if heard else [self.home]

    def heard_legacy(self, now: float) -> None:
        """A previous-version peer's announcement (no `level`) arrived on the legacy topic."""
        self.legacy_heard = now

    def shard_of_topic(self, topic: str) -> tuple[int, int] | None:
        """(level, shard) of one of our shard topics; None for the legacy topic or another swarm's."""
        prefix = ann_topic(self.swarm_id, self.version, 0, 0)[: -len("0/0")]
        if not topic.startswith(prefix):
            return None
        try:
            level, shard = (int(x) for x in topic[len(prefix):].split("/"))
        except ValueError:
            return None
        return level, shard
