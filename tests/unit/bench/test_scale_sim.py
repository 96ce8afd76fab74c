"""The scale simulation (bench/scale/run.py): its accounting adds up, and it runs the project's own exchange code."""

from __future__ import annotations

import random
import sys
from collections import Counter

import pytest

import protocols.announce
import protocols.keys
import swarm.dht.expiry
import swarm.exchange.inbox
import swarm.exchange.poller
import swarm.exchange.polling
import swarm.exchange.push
import swarm.exchange.receive
from bench.scale import gossipsim
from bench.scale import sim as simmod
from bench.scale.model import REPLICAS, Costs, DHTModel, Setting, make_world
from bench.scale.report import Tally
from bench.scale.run import goals

COSTS = Costs(bundle_bytes=9000, announcement_bytes=230, entry_bytes=1000, overhead_s=0.001)


def small(name: str = "t", peers: int = 12, **kw) -> Setting:
    base = dict(rtt_ms=(10.0, 50.0), up_mbit=(50.0, 100.0), nat=0.0, hostile=0.0, churn=False, skew_s=0.0,
                warmup_s=20.0, measure_s=30.0, observers=peers, seed=1)
    return Setting(name=name, peers=peers, **{**base, **kw})


def test_tally_turns_counts_into_per_peer_per_round_figures():
    s = small(peers=4, measure_s=20.0, round_s=10.0)
    world = make_world(s, random.Random(0))
    tally = Tally(s, world, observers={0, 1})
    tally.measuring = True
    tally.dht_store(0, [1, 2], entry_bytes=1000)  # 2 replicas: 2,000 bytes up, one request each
    tally.dht_read(1, [2, 3], size=5000)  # each replica answers the whole value
    tally.push_sent(0, 300)
    tally.push_received(1, 300)
    tally.bundle_bytes(2, 0, 9000)  # observer 0 fetched from peer 2
    tally.finish(type("S", (), {"scale": 2.0})())
    row = tally.row(type("S", (), {"by_id": {}})())
    rounds = 4 * 20.0 / 10.0  # 4 honest peers online for the 20 s measured, rounds of 10 s
    assert tally.peer_rounds == rounds and tally.obs_rounds == 2 * 20.0 / 10.0
    assert row["ann_up_per_round"] == (2000 + 300) / rounds
    assert row["ann_down_per_round"] == (2 * 5000 + 300) / rounds
    assert row["dht_serve_up_per_round"] == 2 * 5000 / rounds
    assert row["bundle_up_per_round"] == 9000 * 2.0 / rounds  # observers' fetches × N / observers
    assert row["bytes_up_per_round"] == pytest.approx(row["ann_up_per_round"] + row["bundle_up_per_round"]
                                                      + row["dht_serve_up_per_round"])
    assert row["holder_requests_per_s"] == 2 / 20.0  # peer 2: one store, one read
    assert row["dht_requests_per_round"] == 2 / rounds


def test_dht_model_keeps_hiveminds_storage_rule_and_expires_entries():
    s = small(peers=8)
    dht = DHTModel(make_world(s, random.Random(0)), entry_bytes=1000)
    assert dht.store("k", "A", b"1", 100.0) and not dht.store("k", "A", b"2", 100.0)  # not strictly later: refused
    assert dht.store("k", "A", b"3", 101.0) and dht.store("k", "B", b"4", 50.0)
    entries, signers = dht.entries("k", 60.0)
    assert entries == {"A": (b"3", 101.0)} and signers == ["A"]
    assert len(dht.holders_of("k", 0.0)) == REPLICAS and dht.holders_of("k", 0.0) == dht.holders_of("k", 99.0)


def test_a_whole_run_conserves_bundles_and_accounts_every_selection():
    sim = simmod.Simulation(small(), COSTS)
    tally = sim.run()
    row = tally.row(sim)
    c = tally.c
    assert c["delivered"] > 0 and row["delivery"] == 1.0  # nobody leaves, nobody is hostile
    assert c["selected"] == c["delivered"] + c["failed"] + len(tally.pending)
    assert sum(tally.up_bundles.values()) == c["down_bundle"] > 0  # every byte downloaded was uploaded
    assert row["groups_per_round"] == pytest.approx(c["delivered_groups"] / tally.obs_rounds)
    # every honest peer publishes once a round: 12 peers × 30 s / 10 s, give or take the edges
    assert 12 * 3 - 12 <= c["published"] <= 12 * 3 + 12
    # every read and store reaches the key's 5 replicas (12 reachable peers, all online)
    assert sum(tally.holder_req.values()) == REPLICAS * (c["reads"] + c["stores"])
    assert row["p95_visible_s"] is not None and 0 < row["p50_visible_s"] <= row["p95_visible_s"]


@pytest.fixture
def spies(monkeypatch):
    """Count every call into the exchange code the simulation must drive (module attributes patched in place)."""
    calls: Counter = Counter()

    def spy(owner, name):
        real = getattr(owner, name)

        def wrapper(*a, **kw):
            calls[f"{getattr(owner, '__name__', owner)}.{name}"] += 1
            calls[f"{getattr(owner, '__name__', owner)}.{name}<-{sys._getframe(1).f_code.co_name}"] += 1
            return real(*a, **kw)
        monkeypatch.setattr(owner, name, wrapper)
    for name in ("offer", "claim", "choose", "settle", "settle_fetched", "take", "judge", "known_peers"):
        spy(swarm.exchange.inbox.Inbox, name)
    spy(swarm.exchange.inbox, "vet_announcement")  # what Inbox.offer / claim vet with
    spy(swarm.exchange.polling.PollPlan, "keys")
    spy(swarm.exchange.polling.PollPlan, "saw")
    spy(swarm.dht.expiry.Expirations, "next")
    spy(swarm.exchange.push.Pusher, "targets")
    spy(swarm.exchange.poller.PollGate, "due")
    return calls


def test_the_simulation_drives_the_projects_own_exchange_code(spies):
    # the simulator uses the project's objects themselves, not copies
    assert simmod.Inbox is swarm.exchange.inbox.Inbox and simmod.PollPlan is swarm.exchange.polling.PollPlan
    assert simmod.Expirations is swarm.dht.expiry.Expirations and simmod.Pusher is swarm.exchange.push.Pusher
    assert simmod.encode_announcement is protocols.announce.encode_announcement
    assert (simmod.window_of, simmod.shard_of, simmod.rollouts_key) == (
        protocols.keys.window_of, protocols.keys.shard_of, protocols.keys.rollouts_key)
    sim = simmod.Simulation(small(peers=20, nat=0.3, hostile=0.1, churn=True), COSTS)
    sim.run()
    for name in ("Inbox.offer", "Inbox.claim", "Inbox.choose", "Inbox.settle", "Inbox.settle_fetched", "Inbox.take",
                 "Inbox.judge", "Inbox.known_peers", "swarm.exchange.inbox.vet_announcement", "PollPlan.keys", "PollPlan.saw",
                 "Expirations.next", "Pusher.targets"):
        assert spies[name] > 0, f"the simulation no longer calls {name}"
    drops = sim.tally.drops
    assert drops["fetch_timeout"] + drops["fetch_failed"] > 0  # ghosts' bytes are never served: real failures


def test_the_gossip_setting_offers_every_gossiped_message_to_the_inbox_and_gates_polls(spies):
    assert gossipsim.PollGate is swarm.exchange.poller.PollGate
    assert gossipsim.vet_announcement is swarm.exchange.receive.vet_announcement
    sim = gossipsim.GossipSimulation(small(peers=20, nat=0.3, hostile=0.1, churn=True, transport="gossip"), COSTS)
    sim.run()
    assert spies["Inbox.offer<-gossiped"] > 0, "gossiped messages no longer go through Inbox.offer"
    assert spies["PollGate.due<-poll_due"] > 0, "DHT polls are no longer gated by PollGate.due"
    c = sim.tally.c
    assert c["polls_skipped"] > 0 and c["polls_read"] > 0 and c["up_gossip"] > 0 and c["down_gossip"] > 0
    cfg = sim.cfg  # the gate's numbers are the config's
    gate = sim.nodes[0].gate
    assert gate.every == cfg.gossip_poll_every and gate.quiet_s == cfg.gossip_quiet_polls * cfg.poll_interval_s


def test_a_gossip_row_carries_its_transport_and_the_gossip_bytes():
    row = gossipsim.simulate_gossip(small(peers=12, transport="gossip", name="gossip"), COSTS)
    assert row["transport"] == "gossip" and row["gossip_reach"] == 1.0 and row["delivery"] == 1.0
    assert row["bytes_down_per_round"] == pytest.approx(row["ann_down_per_round"] + row["bundle_down_per_round"]
                                                        + row["gossip_down_per_round"])
    assert row["gossip_copies_per_delivery"] >= 1.0 and 0 < row["dht_polls_skipped_share"] < 1
    assert simmod.simulate(small(peers=12), COSTS)["transport"] == "dht"


def test_goals_are_read_off_the_rows():
    rows = [{"name": "x", "peers": n, "bytes_up_per_round": up, "bytes_down_per_round": 100.0,
             "holder_requests_per_s": h, "p95_visible_s": p95, "delivery": d, "shards": 4}
            for n, up, h, p95, d in ((100, 100.0, 10.0, 1.0, 0.99), (1000, 120.0, 12.0, 1.5, 0.97),
                                     (10000, 140.0, 30.0, 1.9, 0.96))]
    g = goals(rows, "x")
    assert g["traffic_flat"] and not g["holder_flat"] and g["p95_under_2s"] and g["delivery_95"]
    assert g["no_setting_sized_to_n"] and g["holder_requests_spread"] == 3.0
