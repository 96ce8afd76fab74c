"""A gossip flooder is banned and disconnected (swarm.exchange.gossip_guard, `swarm.gossip_ban_s`), over real
hivemind peers on 127.0.0.1: a bootstrap peer, two honest peers with gossip on and the guard at its default, and a
flooder that publishes 60 valid-looking announcements signed by its own key straight from its transport's pubsub
(3× the guard's burst, at once).

Both honest peers end up with the flooder banned, counted once (`banned`, in every take's announce report too),
their daemons disconnected from it, and its further messages dropped before the Inbox (drop reason `banned`);
they still exchange bundles with each other by gossip (the DHT is polled every 30 s and nobody pushes, so only
gossip delivers within 15 s). With `gossip_ban_s` 0 nothing is banned and this test fails."""

from __future__ import annotations

import secrets
import time

import pytest

from protocols.announce import encode_announcement
from protocols.keys import window_of
from protocols.records import Announcement
from swarm.config import SwarmConfig
from swarm.dht.bootstrap import start_bootstrap
from swarm.exchange.hivemind import HivemindTransport
from tests.integration.conftest import peer_config
from tests.integration.test_gossip_announcements import _wait_on_topic
from tests.integration.test_hivemind_transport import _record

pytestmark = pytest.mark.integration
GOSSIP = {"gossip": True, "poll_interval_s": 30.0, "notify_peers": 0, "fetch_timeout_s": 10}
FLOOD = 60


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


def test_a_flooder_is_banned_and_disconnected_and_the_honest_peers_still_exchange():
    assert SwarmConfig().gossip_ban_s > 0  # on by default (with gossip)
    boot, maddrs = start_bootstrap(startup_timeout_s=60)
    peers: list[HivemindTransport] = []
    try:
        for _ in range(3):
            peers.append(HivemindTransport(cfg=peer_config(maddrs[:1], **GOSSIP)))
        a, b, flooder = peers
        for x, y in ((flooder, a), (flooder, b), (a, b), (b, a)):
            _wait_on_topic(x, y)
        assert flooder.peer_id in _connected(a) | _connected(b)

        _flood(flooder, FLOOD)
        deadline = time.monotonic() + 20
        while not all(h.gossip.guard.is_banned(flooder.peer_id) for h in (a, b)):
            assert time.monotonic() < deadline, "an honest peer never banned the flooder"
            time.sleep(0.2)
        deadline = time.monotonic() + 15  # the disconnects run in the background
        while flooder.peer_id in _connected(a) | _connected(b):
            assert time.monotonic() < deadline, "an honest peer's daemon is still connected to the flooder"
            time.sleep(0.2)

        for h in (a, b):
            took = h.take()
            assert took.drops["banned"] >= 1, took.drops
            assert took.announce["banned"] == 1 and took.announce["disconnects"] >= 1
            assert h.gossip.guard.banned_peers() == [flooder.peer_id]  # the honest peers did not ban each other
            assert h.gossip.received_bytes > 0

        a.publish([_record(a.peer_id, 1)])  # the honest two still exchange, by gossip
        assert [r.peer for r in b.take(min_records=1, timeout=15).records] == [a.peer_id]
        b.publish([_record(b.peer_id, 2)])
        assert [r.peer for r in a.take(min_records=1, timeout=15).records] == [b.peer_id]
        print(f"\nflood of {FLOOD}: received by the honest peers {[h.gossip.received for h in (a, b)]}, "
              f"disconnects {[h.gossip.disconnects for h in (a, b)]}")
    finally:
        for p in peers:
            p.shutdown()
        boot.shutdown()
