"""A node's DHT process keeps nothing for a key once its reads of it are done (swarm.dht.searches).

hivemind's DHTNode filed every get under its key in `pending_get_requests` and emptied the key's set when the get
finished, but never removed the key: a node reading each window's announcement keys kept ≈ 1.8 KB for every key it
ever read, without end (docs/BENCHMARKS.md §15I). Here a node's DHT peer (swarm.dht.peer.start_swarm_dht, as a node
starts it) and a bootstrap on 127.0.0.1: reads of 240 distinct keys — found and not found, one at a time and two
concurrent gets of one key that share a search — answer as before and leave no key behind. On the code before,
240 keys stayed.
"""

from __future__ import annotations

import asyncio
import time
from functools import partial

import pytest

from swarm.config import SwarmConfig
from swarm.dht.bootstrap import start_bootstrap
from swarm.dht.peer import read_keys, start_swarm_dht

pytestmark = pytest.mark.integration


async def _kept(_dht, node) -> tuple[int, int]:
    """(keys hivemind keeps an entry for, searches pending under them), read inside the DHT process."""
    return len(node.pending_get_requests), sum(len(v) for v in node.pending_get_requests.values())


async def _twice(_dht, node, key: str):
    """Two concurrent gets of one key (the second shares the first's search), inside the DHT process."""
    a, b = await asyncio.gather(node.get(key, latest=True), node.get(key, latest=True))
    return [getattr(a, "value", None), getattr(b, "value", None)]


def test_reads_of_many_keys_answer_as_before_and_leave_no_key_behind():
    boot, maddrs = start_bootstrap(startup_timeout_s=120)
    dht, _, _ = start_swarm_dht(SwarmConfig(enabled=True, initial_peers=maddrs, startup_timeout_s=120))
    try:
        expiration = time.time() + 600  # no cache refresh falls inside the test
        stored = [f"searches-{i}" for i in range(0, 240, 2)]
        for key in stored:
            assert dht.store(key, f"value of {key}", expiration)
        assert dht.run_coroutine(_kept) == (0, 0)
        for start in range(0, 240, 40):  # the poller's reads, in batches
            keys = [f"searches-{i}" for i in range(start, start + 40)]
            found = dht.run_coroutine(partial(read_keys, keys=keys, per_key=8))
            assert sorted(found) == sorted(k for k in keys if k in stored)  # unsigned values: repr'd, as always
        for key in stored[:10] + ["searches-1", "searches-3"]:
            want = f"value of {key}" if key in stored else None
            assert dht.run_coroutine(partial(_twice, key=key)) == [want, want]
        assert dht.run_coroutine(_kept) == (0, 0)  # before swarm.dht.searches: (240, 0)
    finally:
        dht.shutdown()
        boot.shutdown()
