"""A bundle announced by gossip is fetched (swarm.exchange.gossip, `swarm.gossip` on), over real hivemind peers on
127.0.0.1: a bootstrap peer, a publisher and a receiver with gossip on, and a peer with it off.

The receiver polls the DHT every 30 s and nobody pushes (`notify_peers` 0), so a bundle published after the
receiver's first poll reaches it within seconds only by gossip; the peer with gossip off (the default) has no
pubsub in its daemon and still gets the same bundle from its DHT poll.

A mixed swarm (swarm.exchange.poller): a gossip peer that gossip delivers to polls the DHT only every
`gossip_poll_every`-th interval, and still exchanges both ways with a peer that has gossip off, through the DHT
copies every peer stores; once a read brings that peer's announcement, it reports the mode `mixed` and reads
every interval."""

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
    assert SwarmConfig().gossip is True  # the default (the test peers' config turns it off unless asked for)
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


def _wait_on_topic(publisher: HivemindTransport, receiver: HivemindTransport) -> None:
    deadline = time.monotonic() + 30  # the two gossiping daemons find each other on the topic
    while receiver.peer_id not in publisher.run_on_loop(publisher.gossip.peers(), 10):
        assert time.monotonic() < deadline, "the publisher's daemon never saw the receiver subscribe"
        time.sleep(0.2)


def _collect(peer: HivemindTransport, want: set, timeout: float) -> set:
    """The peers whose records `peer` takes until it has all of `want` or `timeout` passes."""
    got: set = set()
    deadline = time.monotonic() + timeout
    while not want <= got and time.monotonic() < deadline:
        got |= {r.peer for r in peer.take(min_records=1, timeout=deadline - time.monotonic()).records}
    return got


def test_a_gossip_peer_and_a_polling_peer_exchange_both_ways_while_gossip_backs_the_dht_polls_off():
    mixed = {"notify_peers": 0, "poll_interval_s": 0.5, "fetch_timeout_s": 10}
    backed_off = {**mixed, "gossip": True, "gossip_poll_every": 8}  # polls every 4 s while gossip delivers
    boot, maddrs = start_bootstrap(startup_timeout_s=60)
    peers: list[HivemindTransport] = []
    try:
        for overrides in (backed_off, backed_off, mixed):
            peers.append(HivemindTransport(cfg=peer_config(maddrs[:1], **overrides)))
        gossiper, receiver, plain = peers
        _wait_on_topic(gossiper, receiver)
        gossiper.publish([_record(gossiper.peer_id, 1)])
        assert [r.peer for r in receiver.take(min_records=1, timeout=15).records] == [gossiper.peer_id]
        reports = [receiver.take().announce]
        assert reports[0]["delivering"] and reports[0]["transport"] == "gossip"

        t0 = time.monotonic()
        plain.publish([_record(plain.peer_id, 1)])  # the DHT only: the receiver sees it at a backed-off poll
        got = receiver.take(min_records=1, timeout=30)
        took = time.monotonic() - t0
        reports.append(got.announce)
        assert [r.peer for r in got.records] == [plain.peer_id]
        # a peer seen only by polling: the receiver reads the DHT every interval again, and says so
        assert (got.announce["mode"], got.announce["poll_only_peers"]) == ("mixed", 1), got.announce
        receiver.publish([_record(receiver.peer_id, 2)])  # gossip and the DHT: the plain peer polls it
        assert _collect(plain, {gossiper.peer_id, receiver.peer_id}, 30) == {gossiper.peer_id, receiver.peer_id}
        skipped = sum(r["dht_polls_skipped"] for r in reports)
        assert skipped > 0 and receiver.gossip.offered == 1  # the plain peer's bundle came by the DHT
        assert plain.take().announce == {"transport": "dht"}
        print(f"\nplain → backed-off gossip peer by the DHT: {took:.1f} s; DHT polls skipped: {skipped}")
    finally:
        for p in peers:
            p.shutdown()
        boot.shutdown()


def test_a_bootstrap_started_with_gossip_joins_the_topic_and_relays():
    boot, maddrs = start_bootstrap(startup_timeout_s=60, gossip=True)
    peers: list[HivemindTransport] = []
    try:
        for _ in range(2):
            peers.append(HivemindTransport(cfg=peer_config(maddrs[:1], **GOSSIP)))
        relay = boot.gossip_relay
        deadline = time.monotonic() + 30
        while not {p.peer_id for p in peers} <= set(relay.peers()):
            assert time.monotonic() < deadline, "the bootstrap never saw both peers subscribe"
            time.sleep(0.2)
        assert boot.peer_id.to_base58() in peers[0].run_on_loop(peers[0].gossip.peers(), 10)
        _wait_on_topic(peers[0], peers[1])
        peers[0].publish([_record(peers[0].peer_id, 1)])
        assert [r.peer for r in peers[1].take(min_records=1, timeout=15).records] == [peers[0].peer_id]
        deadline = time.monotonic() + 10
        while relay.received < 1:  # the bootstrap's daemon had the message too (it is in the topic's mesh)
            assert time.monotonic() < deadline, "the bootstrap's subscription never got the message"
            time.sleep(0.1)
    finally:
        for p in peers:
            p.shutdown()
        boot.shutdown()
