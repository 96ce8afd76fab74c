"""A skewed clock cannot lock a peer's DHT announcements, on real hivemind peers (127.0.0.1).

hivemind keeps, per (key, subkey), the value that expires later and refuses a store that does not
expire later still. Before: a learner whose clock was once an hour fast stored its weight announcement
with expiration now + 1 h + ttl, and every later announcement (expiring at now + ttl) was refused until
that one expired — 11 stores refused; a rollout announcement made after the clock stepped back within a
window was refused the same way. Now each store under a key expires later than the entry the DHT holds
for us (swarm.dht.expiry), so the newest announcement is the one the DHT serves.
"""

from __future__ import annotations

import time

import pytest

from bench.harness.records import record as _record
from protocols.announce import decode_announcement
from protocols.keys import rollouts_key, shard_of, window_of
from protocols.weights import decode_weight_announcement, weights_key
from swarm.weights.hivemind import HivemindWeights

pytestmark = pytest.mark.integration
SWARM3_CONFIG = {"poll_interval_s": 0.2}


def _ours(reader, key: str, subkey: bytes):
    """The value the DHT serves under (key, our subkey), read by another peer."""
    async def get():
        return await reader.dht.get(key, latest=True, return_future=True)
    found = reader.run_on_loop(get(), 30)
    entry = found.value.get(subkey) if found is not None else None
    return None if entry is None else entry.value


def _version(reader, key: str, subkey: bytes) -> int | None:
    value = _ours(reader, key, subkey)
    return None if value is None else decode_weight_announcement(value).version


def _eventually(read, want, timeout: float = 60.0):
    """`read()` until it returns `want` (a store reaches the reader's DHT peers a moment after it returns; a busy
    machine makes the moment long), at most `timeout` s; the last value read. A refused store never lands: the
    wait runs out and the caller's assertion fails."""
    deadline = time.monotonic() + timeout
    while (got := read()) != want and time.monotonic() < deadline:
        time.sleep(0.2)
    return got


def test_a_weight_announcement_made_with_a_fast_clock_does_not_lock_the_next_ones(swarm3):
    _, (lt, reader, _) = swarm3
    key = weights_key(lt.cfg.swarm_id, lt.peer_id)
    learner = HivemindWeights(lt)
    learner.clock = lambda: time.time() + 3600  # one announcement while the clock is an hour fast
    learner.publish(1, b"v1", "full")
    learner.clock = time.time  # the clock put right
    for version in (2, 3):
        learner.publish(version, b"v%d" % version, "full")
        assert _eventually(lambda: _version(reader, key, lt.signing_subkey), version) == version
    learner.close()
    # a learner restarted on the same identity (nothing remembered in-process) replaces it too
    again = HivemindWeights(lt)
    again.publish(4, b"v4", "full")
    assert _eventually(lambda: _version(reader, key, lt.signing_subkey), 4) == 4
    again.close()


def test_a_rollout_announcement_after_the_clock_stepped_back_replaces_the_earlier_one(swarm3):
    _, (_, reader, peer) = swarm3
    window = window_of(time.time(), 10.0) + 1  # a whole window ahead, so both stores fall in one window
    start = window * 10.0
    peer.clock = lambda: start + 6.0
    peer.publish([_record(peer.peer_id, index=1)])
    peer.flush()
    peer.clock = lambda: start + 4.0  # NTP stepped the clock back 2 s
    peer.publish([_record(peer.peer_id, index=2)])
    peer.flush()
    peer.clock = time.time
    assert peer.publish_failures == 0  # before: the second store was refused (and counted)
    key = rollouts_key(peer.cfg.swarm_id, window, shard_of(peer.peer_id, peer.cfg.shards))
    def created_at():
        value = _ours(reader, key, peer.signing_subkey)
        return None if value is None else decode_announcement(value).created_at
    assert _eventually(created_at, start + 4.0) == start + 4.0
