"""What hivemind's DHT process kept of every key it ever searched: one entry per key, dropped here once it is empty.

hivemind's `DHTNode` lets concurrent gets of one key share a search (`reuse_get_requests`): it files each search
under its key in `pending_get_requests`, a defaultdict of SortedSets, and takes the search out of the set when it
finishes (`_reuse_finished_search_result`) — but never the key. So every key a node ever read stayed there with an
empty set, ≈ 1.8 KB each: a node reads each window's announcement keys (4 shards every 10 s, swarm.exchange.polling),
up to 1,440 new keys an hour, tens of MB a day, for as long as it runs (measured: docs/BENCHMARKS.md §15I).

`install()` wraps that one method, in the DHT process only (swarm.dht.peer.QuietOrphanDHT.run, before the node
starts): after hivemind has settled a finished search, a key whose set is now empty is removed. Nothing else changes:
a key with searches still pending keeps its set, and the next get of a removed key files itself under a new one
(everything runs on the DHT process's one event loop). `pruned` counts the keys removed.
"""

from __future__ import annotations

from hivemind.dht.node import DHTNode

pruned = 0  # keys removed from pending_get_requests in this process


def install() -> None:
    """Remove a key from hivemind's `pending_get_requests` once its last search has finished (idempotent)."""
    settle = DHTNode._reuse_finished_search_result
    if getattr(settle, "prunes", False):
        return

    def _reuse_finished_search_result(self, finished) -> None:
        global pruned
        settle(self, finished)
        pending = self.pending_get_requests
        if finished.key_id in pending and not pending[finished.key_id]:
            del pending[finished.key_id]
            pruned += 1

    _reuse_finished_search_result.prunes = True
    DHTNode._reuse_finished_search_result = _reuse_finished_search_result
