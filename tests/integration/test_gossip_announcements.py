"""A bundle announced by gossip is fetched (swarm.exchange.gossip, `swarm.gossip` on), over real hivemind peers on
127.0.0.1: a bootstrap peer, a publisher and a receiver with gossip on, and a peer with it off.

The receiver polls the DHT every 30 s and nobody pushes (`notify_peers` 0), so a bundle published after the
receiver's first poll reaches it within seconds only by gossip; the peer with gossip off (the default) has no
pubsub in its daemon and still gets the same bundle from its DHT poll."""

from __future__ import annotations

import time

import pytest

from swarm.config import SwarmConfig
from swarm.dht.bootstrap import start_bootstrap
from swarm.exchange.hivemind import HivemindTransport
from swarm.net.pubsub import Pubsub, PubsubError
from tests.integration.conftest import peer_config
from tests.integration.test_hivemind_transport import _record

pytestmark = pytest.mark.integration
GOSSIP = {"gossip": True, "poll_interval_s": 30.0, "notify_peers": 0, "fetch_timeout_s": 10}


def test_a_bundle_announced_by_gossip_is_fetched():
    assert SwarmConfig().gossip is False  # off unless asked for
    boot, maddrs = start_bootstrap(startup_timeout_s=60)
    peers: list[HivemindTransport] = []
    try:
        for overrides in (GOSSIP, GOSSIP, {"notify_peers": 0}):
            peers.append(HivemindTransport(cfg=peer_config(maddrs[:1], **overrides)))
        publisher, receiver, plain = peers
        assert plain.gossip is None
        with pytest.raises(PubsubError, match="not enabled"):
            plain.run_on_loop(Pubsub.of(plain.p2p).topics(), 10)
        deadline = time.monotonic() + 30  # the two gossiping daemons find each other on the topic
        while receiver.peer_id not in publisher.run_on_loop(publisher.gossip.peers(), 10):
            assert time.monotonic() < deadline, "the publisher's daemon never saw the receiver subscribe"
            time.sleep(0.2)

        t0 = time.monotonic()
        publisher.publish([_record(publisher.peer_id, 1)])
        got = receiver.take(min_records=1, timeout=15)
        took = time.monotonic() - t0
        assert [r.peer for r in got.records] == [publisher.peer_id]
        assert took < 15 and receiver.gossip.offered == 1 and publisher.gossip.published == 1
        assert plain.take(min_records=1, timeout=30).records[0].peer == publisher.peer_id  # by its DHT poll
        print(f"\npublish → records delivered by gossip at the receiver: {took * 1e3:.0f} ms")
    finally:
        for p in peers:
            p.shutdown()
        boot.shutdown()
