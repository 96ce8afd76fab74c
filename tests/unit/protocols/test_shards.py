"""Announcement shards (swarm.exchange.shards, protocols.keys, docs/PROTOCOL.md §5): the level from the swarm's size,
the topics a peer subscribes to and publishes on, nesting across levels, rotation, the legacy topic, and the
announcement's `level` field (absent: the bytes of the previous version)."""

from __future__ import annotations

import random
from collections import Counter

import msgpack
import pytest

from protocols.announce import decode_announcement, encode_announcement
from protocols.codec import RecordError
from protocols.keys import ann_level, ann_shard, ann_topic, announce_topic, shard_of
from protocols.records import Announcement
from swarm.exchange.shards import HYSTERESIS, LEGACY_QUIET_S, ShardPlan

T0 = 1_700_000_000.0


def _ids(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [f"Qm{rng.getrandbits(128):032x}" for _ in range(n)]


def test_the_level_gives_shards_of_tens_of_peers_and_moves_with_hysteresis():
    assert [round(ann_level(n, 32)) for n in (10, 32, 100, 1000, 10000)] == [0, 0, 2, 5, 8]
    for n in (100, 1000, 10000):  # tens of peers a shard
        assert 16 <= n / 2 ** round(ann_level(n, 32)) <= 64
    plan = ShardPlan("QmA", "s", 2, per_shard=32)
    assert plan.level == 0
    assert plan.estimate(1000) and plan.level == 5
    for peers in (1000 * 2 ** HYSTERESIS * 0.95, 1000 / 2 ** HYSTERESIS * 1.05):  # within the hysteresis: stays
        assert not plan.estimate(peers)
    plan = ShardPlan("QmA", "s", 2, per_shard=32)
    for peers in (1000, 1000, 100000, 1000, 1000):  # one wild estimate among five does not move it (median)
        plan.estimate(peers)
    assert plan.level == 5
    fixed = ShardPlan("QmA", "s", 2, fixed_level=3)
    assert not fixed.estimate(100000) and fixed.level == 3


def test_shards_nest_so_that_peers_one_level_apart_share_a_topic():
    ids = _ids(400)
    for k in range(0, 6):
        for p in ids:
            assert ann_shard(p, k) == ann_shard(p, k + 1) % (1 << k) == shard_of(p, 1 << k)
    seen = Counter()
    for a in ids[:200]:
        low = ShardPlan(a, "s", 2, fixed_level=4, extra=0)
        for b in ids[200:]:
            high = ShardPlan(b, "s", 2, fixed_level=5, extra=0)
            if ann_shard(a, 4) != ann_shard(b, 4):
                continue
            # b (one level up) hears a: a's home is b's own shard one level below
            assert low.home in high.subscriptions(T0)
            # a hears b when b's shard is a's own one level up (half of the time)
            seen[high.home in low.subscriptions(T0)] += 1
    assert seen[True] > 0 and seen[False] > 0


def test_a_peer_subscribes_to_a_few_topics_and_publishes_on_its_own_shard():
    plan = ShardPlan("QmA", "swarm", 2, fixed_level=5, extra=1)
    subs = plan.subscriptions(T0)
    assert subs[0] == announce_topic("swarm", 2) == plan.legacy
    assert plan.home == ann_topic("swarm", 2, 5, ann_shard("QmA", 5)) == "swarm/ann/v2/5/" + str(ann_shard("QmA", 5))
    assert [t for t in subs if t.startswith("swarm/ann/")][:3] == [plan.topic(4), plan.topic(5), plan.topic(6)]
    assert len(subs) == 5 and len(set(subs)) == 5
    assert plan.publish_topics(T0) == [plan.home]
    assert plan.shard_of_topic(plan.home) == (5, ann_shard("QmA", 5)) and plan.shard_of_topic(plan.legacy) is None
    small = ShardPlan("QmA", "swarm", 2)  # level 0: one shard, no extra
    assert small.subscriptions(T0) == [small.legacy, small.topic(0), small.topic(1)]


def test_the_extra_shards_rotate_slowly_each_peer_at_its_own_moment():
    ids = _ids(50)
    moves = []
    for p in ids:
        plan = ShardPlan(p, "s", 2, fixed_level=6, extra=2, rotate_s=600)
        home = plan.home
        changed_at = None
        previous = plan.extras(T0)
        assert len(previous) == 2 and home not in previous
        for t in range(0, 1200, 10):
            now = plan.extras(T0 + t)
            assert home not in now and len(now) == 2
            if now != previous and changed_at is None:
                changed_at = t
            previous = now
        assert changed_at is not None  # within two rotation periods it moved
        moves.append(changed_at)
        assert plan.extras(T0 + 1) == plan.extras(T0) or plan.extras(T0 + 599) != plan.extras(T0 + 1)
    assert len(set(moves)) > 10  # peers rotate at moments of their own, not all at once


def test_the_legacy_topic_is_published_on_while_a_previous_version_peer_is_heard():
    plan = ShardPlan("QmA", "s", 2, fixed_level=2)
    assert plan.publish_topics(T0) == [plan.home]
    plan.heard_legacy(T0)
    assert plan.publish_topics(T0 + 10) == [plan.home, plan.legacy]
    assert plan.publish_topics(T0 + LEGACY_QUIET_S + 1) == [plan.home]
    old = ShardPlan("QmA", "s", 2, sharded=False)  # gossip_shards off: the previous version's behaviour
    assert old.subscriptions(T0) == [old.legacy] == old.publish_topics(T0)
    assert not old.estimate(10000)


def _ann(**kw) -> Announcement:
    return Announcement(**{"peer": "QmA", "window": 170000000, "count": 8, "nbytes": 9000, "sha256": "ab" * 32,
                           "policy_version": 3, "created_at": 1_700_000_000.5, **kw})


def test_an_announcement_names_its_level_and_without_one_is_the_previous_versions_bytes():
    plain = _ann()
    assert decode_announcement(encode_announcement(plain)) == plain and plain.level == -1
    assert "level" not in msgpack.unpackb(encode_announcement(plain))
    leveled = _ann(level=5)
    assert decode_announcement(encode_announcement(leveled)).level == 5
    # a decoder that reads the previous version's keys only sees the same announcement (unknown keys ignored)
    d = msgpack.unpackb(encode_announcement(leveled))
    assert {k: v for k, v in d.items() if k != "level"} == msgpack.unpackb(encode_announcement(plain))
    for bad in (-1, 17, 2.0, "3", True):
        d = msgpack.unpackb(encode_announcement(plain))
        d["level"] = bad
        with pytest.raises(RecordError) as exc:
            decode_announcement(msgpack.packb(d))
        assert exc.value.reason == "bad_announcement", bad
