"""A peer handing a node's DHT peer the entries it already holds is not charged for them (swarm.dht.holdings;
docs/benchmarks/reliability.md §15I), over a node's DHT peer as a node starts it (swarm.dht.peer.start_swarm_dht, with
dht_max_held_mib 1: 128 KiB a sender) and two unmodified hivemind DHT peers on 127.0.0.1.

hivemind hands a peer it has just met the entries that peer should store (DHTProtocol.update_routing_table). Here
`owner` stores 36 entries (18 keys, 2 subkeys each, 1 KB) at every peer; `relay` then forgets its routing table and
pings the node, twice: each time hivemind hands the node all 18 dictionaries, copies of what it holds. Before, each
record was charged to the last peer that sent it: relay was charged for the 36 entries (≈ 120 KB of its 128 KiB) and
its own next announcements were refused as `sender_full`.
"""

from __future__ import annotations

import time
from functools import partial

import pytest
from hivemind.dht.storage import DictionaryDHTValue
from hivemind.p2p import PeerID

from tests.integration.conftest import node_dht_and_peers

pytestmark = pytest.mark.integration


async def _books(_dht, node, sender: str) -> dict:
    """Inside the node's DHT process: the entries its storage holds, its books, and what `sender` is charged."""
    from swarm.dht import holdings

    entries = sum(len(v.data) if isinstance(v, DictionaryDHTValue) else 1
                  for v, _ in list(node.protocol.storage.data.values()))
    return {"entries": entries, "charged": holdings.holdings.held_by(sender), **holdings.holdings.stats()}


async def _store(_dht, node, prefix: str, keys: int, subkeys: int, expiration: float) -> list:
    """Inside a peer's DHT process: `keys` × `subkeys` entries of 1 KB; which stores succeeded."""
    return [await node.store(f"{prefix}-{k}", b"x" * 1000, expiration, subkey=f"s{s}")
            for k in range(keys) for s in range(subkeys)]


async def _forget_and_ping(_dht, node, peer: str) -> int:
    """Inside a peer's DHT process: empty its routing table, then ping `peer` (whom it then meets anew)."""
    table = node.protocol.routing_table
    for node_id in list(table.uid_to_peer_id):
        del table[node_id]
    await node.protocol.call_ping(PeerID.from_base58(peer))
    return len(node.protocol.storage.data)


def _wait(probe, until, deadline_s: float = 120.0) -> dict:
    deadline, seen = time.monotonic() + deadline_s, None
    while time.monotonic() < deadline:
        seen = probe()
        if until(seen):
            return seen
        time.sleep(0.5)
    raise AssertionError(f"not reached within {deadline_s:g} s: {seen}")


def test_a_peer_handing_over_entries_the_node_holds_is_not_charged_and_its_own_announcements_are_accepted():
    with node_dht_and_peers(2, dht_max_held_mib=1) as (dht, peers):
        owner, relay = peers
        me, relay_id = dht.peer_id.to_base58(), relay.peer_id.to_base58()
        expiration = time.time() + 900
        assert all(owner.run_coroutine(partial(_store, prefix="owned", keys=18, subkeys=2, expiration=expiration)))
        books = _wait(lambda: dht.run_coroutine(partial(_books, sender=owner.peer_id.to_base58())),
                      lambda b: b["entries"] == 36)
        assert books["charged"] > 100_000 and books["refused"] == {}, books  # owner's, ≈ 3.3 KB an entry
        for handoff in (1, 2):
            assert relay.run_coroutine(partial(_forget_and_ping, peer=me)) == 18  # relay holds the 18 keys too
            books = _wait(lambda: dht.run_coroutine(partial(_books, sender=relay_id)),
                          lambda b: b.get("not_stored", {}).get("not_newer", 0) >= 36 * handoff or b["charged"] > 0)
            assert books["charged"] == 0 and books["entries"] == 36, books  # before: ≈ 120 KB charged to relay
        stored = relay.run_coroutine(partial(_store, prefix="relays-own", keys=10, subkeys=1,
                                             expiration=time.time() + 900))
        books = dht.run_coroutine(partial(_books, sender=relay_id))
        assert books["entries"] == 46 and books["refused"] == {}, (stored, books)  # before: sender_full
        assert 10 * 3000 < books["charged"] < 10 * 3500, books
