"""Announcement shards over real hivemind peers on 127.0.0.1 (swarm.exchange.shards, docs/PROTOCOL.md §5): which
topics a peer's daemon subscribes to and whom its announcements reach by gossip, the rotation of its extra shard,
and a mixed swarm of peers with shards and peers of the previous version (one topic: `gossip_shards` off).

The peers poll the DHT every 30 s and nobody pushes (`notify_peers` 0), so what reaches a receiver within seconds
came by gossip. Identities are drawn until their shards at level 2 are the ones a test needs (protocols.keys:
sha256 of the peer id, mod 4)."""

from __future__ import annotations

import time

import pytest

import swarm.exchange.gossip as gossip_module
from protocols.keys import ann_shard
from swarm.dht.bootstrap import start_bootstrap
from swarm.dht.size import estimate_peers
from swarm.exchange.hivemind import HivemindTransport
from swarm.net.identity import load_or_create_identity, peer_id_of_key
from swarm.net.pubsub import Pubsub
from tests.integration.conftest import peer_config
from tests.integration.test_hivemind_transport import _record

pytestmark = pytest.mark.integration
QUIET = {"gossip": True, "poll_interval_s": 30.0, "notify_peers": 0, "fetch_timeout_s": 10}
LEVEL = 2  # 4 shards


def _identity(tmp_path, name: str, shard: int, level: int = LEVEL) -> str:
    """An identity file whose peer's shard at `level` is `shard`."""
    for i in range(200):
        path = tmp_path / f"{name}-{i}.key"
        key, _ = load_or_create_identity(path)
        if ann_shard(peer_id_of_key(key), level) == shard:
            return str(path)
        path.unlink()
    raise AssertionError("no identity of that shard in 200 draws")


def _daemon_topics(t: HivemindTransport) -> set[str]:
    return set(t.run_on_loop(Pubsub.of(t.p2p).topics(), 10))


def _until(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.3)


def _meshed(publisher: HivemindTransport, receiver: HivemindTransport, topic: str) -> bool:
    return receiver.peer_id in publisher.run_on_loop(publisher.gossip.peers(topic), 10)


def test_a_peer_subscribes_to_its_shards_and_its_gossip_reaches_its_shard_not_the_others(tmp_path):
    boot, maddrs = start_bootstrap(startup_timeout_s=60)
    peers: list[HivemindTransport] = []
    try:
        cfg = {**QUIET, "gossip_shard_level": LEVEL, "gossip_extra_shards": 0}
        for name, shard in (("pub", 1), ("mate", 1), ("other", 2)):
            peers.append(HivemindTransport(cfg=peer_config(maddrs[:1], identity_path=_identity(tmp_path, name, shard),
                                                           **cfg)))
        pub, mate, other = peers
        # each daemon subscribes to exactly the plan's topics: legacy, its shard at levels 1, 2, 3
        for p in peers:
            assert _daemon_topics(p) == set(p.gossip.topics) == set(p.gossip.plan.subscriptions(time.time()))
            assert len(p.gossip.topics) == 4 and p.gossip.level == LEVEL
        assert pub.gossip.topic == mate.gossip.topic != other.gossip.topic
        assert pub.gossip.topic not in other.gossip.topics
        _until(lambda: _meshed(pub, mate, pub.gossip.topic), 30, "the shard mate never subscribed, as seen by pub")
        before = other.gossip.received

        pub.publish([_record(pub.peer_id, 1)])
        got = mate.take(min_records=1, timeout=15)
        assert [r.peer for r in got.records] == [pub.peer_id] and mate.gossip.offered == 1
        time.sleep(2.0)  # what gossip would have brought `other` by now, it would have
        # not its shard's gossip (its DHT poll may bring the record meanwhile: that is the DHT's copy, below)
        assert other.gossip.received == before and other.gossip.offered == 0
        assert pub.gossip.published == 1  # one topic: its home shard (no previous-version peer heard)
        # the DHT copy is there for everyone: the other shard's peer gets it at its next poll
        assert [r.peer for r in other.take(min_records=1, timeout=45).records] == [pub.peer_id]
        # the size estimate from the DHT's routing table: the 3 peers and the bootstrap
        async def estimate():  # the DHT call made on the transport's loop, as swarm.exchange.gossip makes it: an
            return await pub.dht.run_coroutine(estimate_peers, return_future=True)  # MPFuture made elsewhere has no loop
        assert pub.run_on_loop(estimate(), 10) == 4.0
    finally:
        for p in peers:
            p.shutdown()
        boot.shutdown()


def test_the_extra_shard_rotates_and_the_daemon_follows(tmp_path, monkeypatch):
    monkeypatch.setattr(gossip_module, "SHARD_CHECK_S", 1.0)
    boot, maddrs = start_bootstrap(startup_timeout_s=60)
    t = None
    try:
        t = HivemindTransport(cfg=peer_config(maddrs[:1], **QUIET, gossip_shard_level=LEVEL, gossip_extra_shards=1,
                                              gossip_rotate_s=10))
        first = set(t.gossip.topics)
        assert len(first) == 5 and _daemon_topics(t) == first
        # the extra shard is a hash of (peer id, epoch): the next epoch may draw the same shard again (p = 3/8 at
        # 4 shards), so wait for the first time the plan gives another one, not for a fixed number of epochs
        now = time.time()
        extra = t.gossip.plan.extras(now)
        rotates_in = next(k for k in range(1, 3600) if t.gossip.plan.extras(now + k) != extra)
        _until(lambda: set(t.gossip.topics) != first, rotates_in + 30, "the extra shard never rotated")
        second = set(t.gossip.topics)
        assert len(second) == 5 and len(first & second) == 4  # only the extra one changed
        assert t.gossip.plan.home in second and t.gossip.resubscribed >= 1
        _until(lambda: _daemon_topics(t) == set(t.gossip.topics), 10, "the daemon's topics never followed")
    finally:
        if t is not None:
            t.shutdown()
        boot.shutdown()


def test_a_mixed_swarm_of_previous_version_and_sharded_peers_exchanges_both_ways(tmp_path):
    boot, maddrs = start_bootstrap(startup_timeout_s=60)
    peers: list[HivemindTransport] = []
    try:
        old = HivemindTransport(cfg=peer_config(maddrs[:1], **QUIET, gossip_shards=False))
        peers.append(old)
        new = [HivemindTransport(cfg=peer_config(maddrs[:1], **QUIET, gossip_shard_level=LEVEL)) for _ in range(2)]
        peers += new
        assert old.gossip.topics == [old.gossip.plan.legacy] and old.gossip.level == -1
        legacy = old.gossip.plan.legacy
        for n in new:
            assert legacy in n.gossip.topics
            _until(lambda n=n: _meshed(old, n, legacy), 30, "a sharded peer never joined the legacy topic")

        old.publish([_record(old.peer_id, 1)])  # no `level`: the sharded peers hear a previous-version peer
        for n in new:
            got = n.take(min_records=1, timeout=15)
            assert [r.peer for r in got.records] == [old.peer_id], got.drops
            assert n.gossip.plan.publish_topics(time.time()) == [n.gossip.plan.home, legacy]
        new[0].publish([_record(new[0].peer_id, 2)])  # on its shard and on the legacy topic: the old peer hears it
        got = old.take(min_records=1, timeout=15)
        assert [r.peer for r in got.records] == [new[0].peer_id]
        assert old.gossip.offered == 1
        if new[0].gossip.topic in new[1].gossip.topics:  # the second copy, on the shard, is a duplicate: not twice
            time.sleep(1.0)
            assert [r.peer for r in new[1].take(min_records=1, timeout=15).records] == [new[0].peer_id]
            assert new[1].take(timeout=2).records == []
    finally:
        for p in peers:
            p.shutdown()
        boot.shutdown()
