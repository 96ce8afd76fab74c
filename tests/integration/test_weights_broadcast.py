"""The weight broadcast on real hivemind peers (127.0.0.1): a learner's signed announcement and its weights over
`/rlswarm/weights/2`, fetched by the samplers that follow it — and nothing else (docs/PROTOCOL.md §10)."""

from __future__ import annotations

import os
import time
from collections import OrderedDict

import pytest

from protocols.weights import weights_key
from swarm.weights.channel import WeightLimits, make_weight_announcement
from swarm.weights.hivemind import HivemindWeights

pytestmark = pytest.mark.integration

SWARM3_CONFIG = {"poll_interval_s": 0.2}


def _wait(channel, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        update = channel.take()
        if update is not None:
            return update
        time.sleep(0.05)
    return None


def _drops_until(channel, reason: str, timeout: float = 60.0) -> dict:
    deadline, seen = time.monotonic() + timeout, {}
    while time.monotonic() < deadline and reason not in seen:
        for k, v in channel.take_drops().items():
            seen[k] = seen.get(k, 0) + v
        time.sleep(0.1)
    return seen


def test_samplers_follow_the_learner_and_nothing_else(swarm3):
    _, (lt, at, bt) = swarm3
    learner = HivemindWeights(lt)
    a = HivemindWeights(at, follow=[lt.peer_id], poll_interval_s=0.1)
    small = HivemindWeights(bt, follow=[lt.peer_id], poll_interval_s=0.1, limits=WeightLimits(max_bytes=1 << 20))
    v0 = os.urandom(3 << 20) + b"v0"  # 4 frames of ≤ 1 MiB
    learner.publish(0, v0, "full")
    got = _wait(a)
    assert got is not None and (got.version, got.data, got.learner) == (0, v0, lt.peer_id)
    # over the cap: refused from the announcement alone, no byte fetched
    assert _drops_until(small, "too_large").get("too_large") == 1 and small.fetched_bytes == 0
    v1 = b"v1" * 1000
    learner.publish(1, v1, "full")
    got = _wait(a)
    assert (got.version, got.data) == (1, v1) and a.fetched_bytes == len(v0) + len(v1)
    assert _wait(small).data == v1  # small enough now
    # a peer storing its own value under the learner's key (its own subkey): counted, never fetched
    _, forged = make_weight_announcement(bt.peer_id, 2, b"evil", "full")

    async def store_forged():
        return await bt.dht.store(weights_key(bt.cfg.swarm_id, lt.peer_id), forged, expiration_time=time.time() + 60,
                                  subkey=bt.signing_subkey, return_future=True)

    # a DHT store reports the last replica's answer, and on a loaded machine one replica may refuse or
    # time out: what is tested is the receiver's count, so the forger tries again as a real one would
    assert any(bt.run_on_loop(store_forged(), 10) for _ in range(3))
    assert _drops_until(a, "forged").get("forged") == 1
    assert a.take() is None
    # bytes that do not match the digest the learner announced: dropped after the fetch
    v2 = b"v2" * 1000
    class Lying(OrderedDict):  # the learner serves other bytes under the name it announces, from the first moment
        def __setitem__(self, sha256, data):  # (swapped after publish, a fast sampler had fetched the true v2)
            super().__setitem__(sha256, b"v3" * 1000)
    learner._served = Lying(learner._served)
    learner.publish(2, v2, "full")
    assert _drops_until(a, "digest_mismatch").get("digest_mismatch") == 1
    assert a.take() is None
