"""The swarm's size as one DHT peer sees it: the estimate that sizes the announcement shards (swarm.exchange.shards).

Kademlia ids are uniform over 2^160, so among N peers the k-th nearest to our own id lies at an XOR distance of
about k / N of the id space: N ≈ k / d_k. `estimate_peers` runs inside the DHT process (like
swarm.dht.peer.read_keys) on hivemind's own routing table, which holds our nearest neighbours best of all (its
deepest buckets are the ones around our id); with fewer than k peers in the table it counts them (a small swarm:
the table holds every peer it knows). The estimate counts DHT peers — a bootstrap peer too, client-mode peers not
(they are no DHT servers) — and is noisy (about ± 1 / √k): the caller takes the median of several.
"""

from __future__ import annotations

from hivemind.dht.routing import DHTID

NEAREST = 8  # the k of the estimate


async def estimate_peers(_dht, node, k: int = NEAREST) -> float:
    """Runs inside the DHT process: the swarm's estimated size (peers, ourselves included)."""
    near = node.protocol.routing_table.get_nearest_neighbors(node.node_id, k, exclude=node.node_id)
    if len(near) < k:
        return float(len(near) + 1)
    distance = node.node_id.xor_distance(near[-1][0]) / DHTID.MAX
    return max(float(k + 1), k / max(distance, 1e-30))
