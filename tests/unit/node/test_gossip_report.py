"""How a node reports and paces its announcement transport: the DHT poll gate while gossip delivers
(swarm.exchange.poller.PollGate), what a take reports (swarm.exchange.gossip.GossipReport), how two takes of a
round add up (node.round.steps.merge_announce), and the Prometheus series (node.books.metrics.Prom)."""

from __future__ import annotations

from types import SimpleNamespace

from node.books.metrics import Prom
from node.round.steps import merge_announce
from node.round.record import RoundRecord
from swarm.config import SwarmConfig
from swarm.exchange.gossip import GossipReport
from swarm.exchange.poller import PollGate


def test_the_dht_is_polled_every_kth_tick_while_gossip_delivers_and_every_tick_when_it_is_quiet():
    gate = PollGate(every=4, quiet_polls=10, interval_s=0.5)  # gossip is quiet after 5 s
    assert all(gate.due(None, t) for t in range(10)) and gate.skipped == 0  # no gossip yet: every tick
    polled = [gate.due(100.0, 100.0 + i * 0.5) for i in range(8)]  # delivering
    assert polled == [False, False, False, True, False, False, False, True] and gate.skipped == 6
    assert gate.due(100.0, 106.0) and gate.due(100.0, 106.5)  # quiet again (> 5 s): every tick


def test_a_peer_seen_only_by_polling_makes_every_tick_read_until_it_gossips_or_the_window_passes():
    gate = PollGate(every=4, quiet_polls=10, interval_s=0.5)
    gate.saw_gossip("A", 100.0)
    assert gate.mode(100.0, 100.5) == "gossip" and not gate.saw_poll_only("A", 100.5)  # gossip delivered from A
    assert gate.saw_poll_only("B", 101.0) and gate.mode(100.5, 101.0) == "mixed"  # B: new by a read, never gossiped
    assert all(gate.due(100.5, 101.0 + i * 0.5) for i in range(6)) and gate.skipped == 0  # every tick reads
    gate.saw_gossip("B", 104.0)  # B's next announcement arrived by gossip: back to reading every 4th tick
    assert gate.mode(104.0, 104.5) == "gossip" and gate.poll_only_peers(104.5) == 0
    assert gate.saw_poll_only("C", 105.0) and gate.poll_only_peers(109.9) == 1
    assert gate.poll_only_peers(110.1) == 0 and gate.mode(109.0, 110.1) == "gossip"  # C forgotten after 5 s
    assert gate.mode(100.0, 110.1) == "dht"  # gossip itself quiet for > 5 s
    for i in range(PollGate.MAX_TRACKED + 10):  # both books stay bounded
        gate.saw_poll_only(f"p{i}", 111.0)
    assert len(gate.poll_only) == PollGate.MAX_TRACKED


def _transport(gossip: bool, running):
    return SimpleNamespace(cfg=SwarmConfig(gossip=gossip), gossip=running, gossip_fallback=None if running else "why",
                           poll_gate=PollGate(8, 60, 0.5))


def test_a_take_reports_the_transport_and_the_gossip_counts_since_the_previous_take():
    assert GossipReport().since_last(_transport(False, None)) == {"transport": "dht"}
    g = SimpleNamespace(received=3, offered=2, published=1, publish_failures=0, publish_paced=0,
                        received_bytes=900, banned=0, fetch_spread=0, last_valid=None, level=3, topics=["a", "b"])
    t, report = _transport(True, g), GossipReport()
    first = report.since_last(t)
    assert first["transport"] == "gossip" and first["pubsub"] and first["offered"] == 2 and not first["delivering"]
    assert first["mode"] == "dht" and first["poll_only_peers"] == 0
    assert (first["level"], first["topics"]) == (3, 2)  # the announcement shards (swarm.exchange.shards)
    g.offered, g.received, g.banned = 5, 7, 1
    second = report.since_last(t)
    assert (second["offered"], second["received"], second["published"]) == (3, 4, 0)
    assert (second["banned"], second["received_bytes"]) == (1, 0) and "disconnects" not in second
    down = GossipReport().since_last(_transport(True, None))
    assert down["transport"] == "dht" and down["pubsub"] is False and down["fallback"] == "why"


def test_a_rounds_takes_add_up_and_reach_prometheus():
    a = {"transport": "gossip", "pubsub": True, "delivering": False, "received": 2, "offered": 1, "published": 1,
         "publish_failures": 0, "dht_polls_skipped": 3, "mode": "mixed", "poll_only_peers": 2, "level": 2, "topics": 5}
    b = {**a, "delivering": True, "received": 5, "mode": "gossip", "poll_only_peers": 0}
    merged = merge_announce(a, b)
    assert merged["received"] == 7 and merged["dht_polls_skipped"] == 6 and merged["delivering"] is True
    assert (merged["mode"], merged["poll_only_peers"]) == ("gossip", 0)  # states: the later take's
    assert (merged["level"], merged["topics"]) == (2, 5)
    assert merge_announce({}, b) == b
    prom = Prom("n")
    m = {"step_s": 0.0, "tokens_per_s": 0.0, "announce_transport": "gossip",
         "gossip": {k: v for k, v in merged.items() if k != "transport"}}
    prom.observe(RoundRecord.from_line(m))
    assert prom.registry.get_sample_value("swarm_gossip_messages_total", {"node": "n", "what": "received"}) == 7
    assert prom.registry.get_sample_value("swarm_gossip_running", {"node": "n"}) == 1
    assert prom.registry.get_sample_value("swarm_gossip_poll_only_peers", {"node": "n"}) == 0
