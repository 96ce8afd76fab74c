"""Which of one DHT key's signed entries a read keeps (docs/PROTOCOL.md §5), the same inside the DHT process
(swarm.dht.peer.read_keys) and on the in-memory twin (swarm.exchange.twin).

A crowded key holds more entries than a reader keeps (`max_entries_per_key`): `pick_entries` keeps the peers in
good standing first, then the others at random, backed-off peers last, so a crowd of fresh identities cannot push
a peer we use out of the read itself (the order comes from swarm.exchange.standing).
"""

from __future__ import annotations

import random


def pick_entries(entries: list, per_key: int, rng: random.Random, prefer=(), avoid=()) -> list:
    """At most `per_key` of one key's signed entries (peer, value): peers in `prefer` (good standing) first, then
    the others at random, peers in `avoid` (backed off) last, so that fresh identities crowding a shard cannot
    push the peers whose bundles we use out of our read (docs/PROTOCOL.md §5)."""
    if len(entries) <= per_key:
        return entries
    entries = list(entries)
    rng.shuffle(entries)
    prefer, avoid = set(prefer), set(avoid)
    entries.sort(key=lambda e: 0 if e[0] in prefer else 2 if e[0] in avoid else 1)  # stable: random within each
    return entries[:per_key]
