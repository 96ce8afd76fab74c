"""A gossip flooder is banned (swarm.exchange.gossip_guard, `swarm.gossip_ban_s`), and nothing more, over real
hivemind peers on 127.0.0.1: a bootstrap peer, two honest peers with gossip on and the guard at its default, and a
flooder that publishes FLOOD valid-looking announcements signed by its own key and dated now, straight from its
transport's pubsub (3× the allowance of one slot, at once).

Both honest peers end up with the flooder banned, counted once (`banned`, in every take's announce report too), and
its further messages dropped before the Inbox (drop reason `banned`); their daemons stay connected to it (a ban
disconnects nobody: before issue 49 it did, and the disconnect also cut a banned peer's bundle streams); they still
exchange bundles with each other by gossip (the DHT is polled every 30 s and nobody pushes, so only gossip delivers
within 15 s). With `gossip_ban_s` 0 nothing is banned and this test fails."""

from __future__ import annotations

import secrets
import time

import pytest

from protocols.announce import encode_announcement
from protocols.keys import window_of
from protocols.records import Announcement
from swarm.config import SwarmConfig
from swarm.dht.bootstrap import start_bootstrap
from swarm.exchange.gossip_guard import SLOT_LIMIT
from swarm.exchange.hivemind import HivemindTransport
from tests.integration.conftest import peer_config
from tests.integration.test_gossip_announcements import _wait_on_topic
from tests.integration.test_hivemind_transport import _record

pytestmark = pytest.mark.integration
GOSSIP = {"gossip": True, "poll_interval_s": 30.0, "notify_peers": 0, "fetch_timeout_s": 10}
FLOOD = 3 * SLOT_LIMIT  # dated within a second: at least half of them in one slot, whatever its boundary


def _flood(flooder: HivemindTransport, n: int) -> None:
    async def publish_all():
        for i in range(n):
            now = time.time()
            ann = Announcement(peer=flooder.peer_id, window=window_of(now, flooder.cfg.window_s), count=8,
                               nbytes=4000, sha256=secrets.token_hex(32), policy_version=i, created_at=now,
                               addrs=flooder.addrs)
            await flooder.gossip.pubsub.publish(flooder.gossip.topic, encode_announcement(ann))

    flooder.run_on_loop(publish_all(), 60)


def _connected(peer: HivemindTransport) -> set[str]:
    return {p.peer_id.to_base58() for p in peer.run_on_loop(peer.p2p.list_peers(), 10)}


def test_a_flooder_is_banned_not_disconnected_and_the_honest_peers_still_exchange():
    assert SwarmConfig().gossip_ban_s > 0  # on by default (with gossip)
    boot, maddrs = start_bootstrap(startup_timeout_s=60)
    peers: list[HivemindTransport] = []
    try:
        for _ in range(3):
            peers.append(HivemindTransport(cfg=peer_config(maddrs[:1], **GOSSIP)))
        a, b, flooder = peers
        for x, y in ((flooder, a), (flooder, b), (a, b), (b, a)):
            _wait_on_topic(x, y)
        linked = [h for h in (a, b) if flooder.peer_id in _connected(h)]
        assert linked

        _flood(flooder, FLOOD)
        deadline = time.monotonic() + 20
        while not all(h.gossip.guard.is_banned(flooder.peer_id) for h in (a, b)):
            assert time.monotonic() < deadline, "an honest peer never banned the flooder"
            time.sleep(0.2)
        for h in (a, b):
            took = h.take()
            assert took.drops["banned"] >= 1, took.drops
            assert took.announce["banned"] == 1 and "disconnects" not in took.announce
            assert h.gossip.guard.banned_peers() == [flooder.peer_id]  # the honest peers did not ban each other
            assert h.gossip.received_bytes > 0

        a.publish([_record(a.peer_id, 1)])  # the honest two still exchange, by gossip
        assert [r.peer for r in b.take(min_records=1, timeout=15).records] == [a.peer_id]
        b.publish([_record(b.peer_id, 2)])
        assert [r.peer for r in a.take(min_records=1, timeout=15).records] == [b.peer_id]
        assert all(flooder.peer_id in _connected(h) for h in linked)  # banned, still connected
        print(f"\nflood of {FLOOD}: received by the honest peers {[h.gossip.received for h in (a, b)]}, "
              f"still connected to the flooder: {len(linked)}")
    finally:
        for p in peers:
            p.shutdown()
        boot.shutdown()
