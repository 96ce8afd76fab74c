"""What a node's DHT process holds for other peers is bounded (swarm.dht.holdings; docs/PROTOCOL.md §5), over a node's
DHT peer as a node starts it (swarm.dht.peer.start_swarm_dht, here with dht_max_held_mib 1: 128 KiB a sender) and an
unmodified hivemind DHT peer on 127.0.0.1 that stores what it likes at it.

Before: the node held every value it was sent, under any key, for as long as asked — 20 values of 1 MiB expiring a
year later were all held (20 MiB), as were 300 small ones from one sender.
"""

from __future__ import annotations

import time
from functools import partial

import pytest
from hivemind.dht.storage import DictionaryDHTValue

from tests.integration.conftest import node_dht_and_peers

pytestmark = pytest.mark.integration


async def _held(_dht, node) -> dict:
    """Inside the node's DHT process: the entries and value bytes its storage holds, and the holdings' books."""
    from swarm.dht import holdings

    entries = nbytes = 0
    for value, _ in list(node.protocol.storage.data.values()):
        subs = list(value.data.values()) if isinstance(value, DictionaryDHTValue) else [value]
        entries += len(subs)
        nbytes += sum(len(getattr(v, "value", v)) for v in subs)
    return {"entries": entries, "bytes": nbytes, **(holdings.holdings.stats() if holdings.holdings else {})}


async def _store(_dht, node, prefix: str, n: int, size: int, ahead_s: float) -> None:
    """Inside the storing peer's DHT process: `n` values of `size` bytes under keys of no one's."""
    for i in range(n):
        await node.store(f"{prefix}-{i}", b"x" * size, time.time() + ahead_s)


def test_a_peer_cannot_make_a_node_hold_more_than_its_share():
    with node_dht_and_peers(2, dht_max_held_mib=1) as (dht, peers):
        greedy, other = peers
        assert dht.run_coroutine(_held)["entries"] == 0
        greedy.run_coroutine(partial(_store, prefix="big", n=20, size=1 << 20, ahead_s=365 * 86400))
        greedy.run_coroutine(partial(_store, prefix="far", n=5, size=100, ahead_s=365 * 86400))
        held = dht.run_coroutine(_held)
        assert held["entries"] == 0 and held["refused"] == {"too_big": 20, "too_far": 5}, held  # before: 20 MiB
        greedy.run_coroutine(partial(_store, prefix="small", n=300, size=1000, ahead_s=600))
        held = dht.run_coroutine(_held)
        # each record charged ≈ 1 KB + 2 KiB + 256 B: a sender's 128 KiB holds about 38 of them
        # (the rest refused as sender_full, a few by the sender budget of swarm.dht.budget: each store also finds)
        assert 30 <= held["entries"] <= 40 and held["refused"]["sender_full"] >= 200, held
        assert held["held_bytes"] <= (1 << 20) // 8
        other.run_coroutine(partial(_store, prefix="other", n=10, size=1000, ahead_s=600))
        after = dht.run_coroutine(_held)
        assert after["entries"] == held["entries"] + 10  # another sender still has its own share
