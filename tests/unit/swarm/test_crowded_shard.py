"""A crowd of identities in one shard cannot push a peer the node uses out of its reads (docs/PROTOCOL.md §5,
swarm.dht.entries.pick_entries), on the in-memory twin.

A read keeps at most `max_entries_per_key` of a key's entries. Before, a random subset: with 100 fresh
identities beside a peer in good standing in its shard and 8 entries kept, the peer's announcement was in a
read with probability 8 / 101, and its bundles, announced through the DHT alone, were mostly never seen. Now
the peers in good standing are kept first, the others at random, backed-off peers last.
"""

from __future__ import annotations

import random

from bench.harness.records import record as _record
from protocols.keys import rollouts_key, shard_of
from swarm.dht.entries import pick_entries
from swarm.exchange.twin import InMemoryHub, InMemoryTransport
from swarm.exchange.transport import Limits, make_bundle
from tests.unit.swarm.test_transport_twin import Clock


def _crowd(near: str, n: int, shards: int = 4) -> list[str]:
    """n identities in `near`'s shard."""
    want, out, i = shard_of(near, shards), [], 0
    while len(out) < n:
        if shard_of(f"ghost-{i}", shards) == want:
            out.append(f"ghost-{i}")
        i += 1
    return out


def test_pick_entries_keeps_preferred_first_and_avoided_last():
    entries = [(f"p{i}", b"v") for i in range(50)]
    rng = random.Random(0)
    picked = pick_entries(entries, 8, rng, prefer=["p49", "p7"], avoid=[f"p{i}" for i in range(10, 50) if i != 49])
    names = [p for p, _ in picked]
    assert set(names[:2]) == {"p49", "p7"} and len(names) == 8
    assert all(int(p[1:]) < 10 for p in names[2:])  # the rest from those not avoided
    assert pick_entries(entries[:5], 8, rng) == entries[:5]


def test_a_good_peer_among_a_hundred_fresh_identities_in_its_shard_is_read_every_time():
    clock = Clock()
    hub = InMemoryHub()
    victim = InMemoryTransport(hub, "victim", limits=Limits(), clock=clock, max_entries_per_key=8, notify_peers=0)
    honest = InMemoryTransport(hub, "honest", clock=clock, notify_peers=0)  # DHT only: no push reaches the victim
    honest.publish([_record("honest", index=0)])
    assert len(victim.take().records) == 1
    victim.judge({"honest": (1, 0)})  # used: good standing
    crowd = _crowd("honest", 100)
    got = 0
    for r in range(1, 11):
        clock.t += 2.0  # five bundles a window: well within its share of the fan-in budget (16 a window)
        for g in crowd:  # each round, every identity of the crowd announces a bundle nobody serves
            _, value, ann = make_bundle(g, [_record(g, round_=r)], now=clock.t)
            hub.announce(rollouts_key("rlswarm", ann.window, shard_of(g, 4)), g, value)
        honest.publish([_record("honest", round_=r, index=r)])
        delivery = victim.take()
        got += sum(rec.peer == "honest" for rec in delivery.records)
        victim.judge({"honest": (1, 0)} if any(rec.peer == "honest" for rec in delivery.records) else {})
    assert got == 10, got  # before: a random 8 of 101 entries a read, most of its bundles never seen
