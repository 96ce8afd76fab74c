"""With `swarm.gossip` on but no pubsub to be had, a peer works on DHT polling alone, says so once in its log, and
reports it in every take (swarm.exchange.gossip: start_gossip, GossipReport), over real hivemind peers on 127.0.0.1.

Two failures are forced: a p2pd that refuses its pubsub flags (an unknown router: p2pd exits at start, and
swarm.dht.peer starts it again without them), and a daemon started without pubsub, so that subscribing fails.
A plain peer (gossip off) and the two fallen-back peers then exchange bundles every way by the DHT."""

from __future__ import annotations

import logging

import pytest

from swarm.dht.bootstrap import start_bootstrap
from swarm.exchange.hivemind import HivemindTransport
from swarm.net import pubsub
from tests.integration.conftest import peer_config
from tests.integration.test_hivemind_transport import _record

pytestmark = pytest.mark.integration
GOSSIP = {"gossip": True, "notify_peers": 0, "poll_interval_s": 0.5, "fetch_timeout_s": 10}


def test_without_pubsub_a_gossip_peer_falls_back_to_the_dht(monkeypatch, caplog):
    boot, maddrs = start_bootstrap(startup_timeout_s=60)
    peers: list[HivemindTransport] = []
    try:
        with caplog.at_level(logging.WARNING):
            # the DHT process is forked at start, so each daemon gets the flags set when its peer starts
            monkeypatch.setattr(pubsub, "DAEMON_FLAGS", {"pubsub": True, "pubsubRouter": "no-such-router"})
            peers.append(HivemindTransport(cfg=peer_config(maddrs[:1], **GOSSIP)))
            monkeypatch.setattr(pubsub, "DAEMON_FLAGS", {})
            peers.append(HivemindTransport(cfg=peer_config(maddrs[:1], **GOSSIP)))
        monkeypatch.undo()
        peers.append(HivemindTransport(cfg=peer_config(maddrs[:1], notify_peers=0)))
        refused, unsubscribed, plain = peers
        assert refused.gossip is None and "did not start with pubsub" in refused.gossip_fallback
        assert unsubscribed.gossip is None and "subscribing" in unsubscribed.gossip_fallback
        said = [r for r in caplog.records if r.name == "swarm.exchange.gossip" and "unavailable" in r.getMessage()]
        assert len(said) == 2  # once per peer

        for i, p in enumerate(peers):
            p.publish([_record(p.peer_id, 1, index=i)])
        for p in peers:
            got = set()
            for _ in range(3):
                got |= {r.peer for r in p.take(min_records=2 - len(got), timeout=30).records}
                if len(got) >= 2:
                    break
            assert got == {q.peer_id for q in peers if q is not p}, "a fallen-back peer missed a bundle"
        report = refused.take().announce
        assert report["transport"] == "dht" and report["pubsub"] is False and report["fallback"]
        assert report["dht_polls_skipped"] == 0 and report["received"] == 0
        assert plain.take().announce == {"transport": "dht"}
    finally:
        for p in peers:
            p.shutdown()
        boot.shutdown()
