"""How many DHT requests a node's DHT process serves one peer (docs/PROTOCOL.md §5): a budget per sender.

hivemind's DHT peer answers every store and find it is sent, from anyone, and each costs it work in Python
before any rule of ours applies: a store is deserialised, validated entry by entry (swarm.dht.peer's validators)
and answered; a find is looked up and answered with neighbours. One peer storing thousands of entries a
second (unsigned ones, which are refused, cost the same to refuse) kept every node's DHT process busy. So in
the DHT process each sender (the libp2p peer id of the stream) gets a token bucket of RATE_PER_S items a
second (items: the records of a store, the keys of a find), bursts of BURST; a request beyond it is answered
at once, unread — a store as refused, a find as "not found" with no neighbours. An honest peer stores one
announcement per round and reads a few keys per poll: far below. Refusals are counted and logged now and
then. `install()` patches hivemind's DHTProtocol in the DHT process only (swarm.dht.peer.QuietOrphanDHT.run),
before its handlers are registered.
"""

from __future__ import annotations

import logging
import time

from hivemind.dht.protocol import DHTProtocol
from hivemind.p2p import P2PContext
from hivemind.proto import dht_pb2

from swarm.bucket import Buckets

log = logging.getLogger(__name__)
RATE_PER_S = 64.0  # items (stored records, looked-up keys) one sender may have served per second
BURST = 512.0
MAX_SENDERS = 4096  # senders remembered (the least recent forgotten first: a forgotten one starts full)


class SenderBudget:
    """Token buckets per sender (module docstring)."""

    def __init__(self, rate: float = RATE_PER_S, burst: float = BURST, clock=time.monotonic):
        self.rate, self.burst, self.clock = rate, burst, clock
        self._buckets = Buckets(rate, burst, MAX_SENDERS)  # sender → its tokens
        self.refused = 0  # items refused
        self._logged = 0.0

    def spend(self, sender: str, items: int) -> bool:
        now = self.clock()
        ok = self._buckets.take(sender, items, now)
        if not ok:
            self.refused += items
            if now - self._logged > 60:
                self._logged = now
                log.info("DHT requests over their sender's budget: %d items refused so far (last: %s)",
                         self.refused, sender[:16])
        return ok


def install(budget: SenderBudget | None = None) -> SenderBudget:
    """Put `budget` in front of hivemind's DHT store and find handlers (in this process)."""
    budget = budget or SenderBudget()
    store, find = DHTProtocol.rpc_store, DHTProtocol.rpc_find
    if getattr(store, "budgeted", False):
        return budget

    async def rpc_store(self, request: dht_pb2.StoreRequest, context: P2PContext) -> dht_pb2.StoreResponse:
        if not budget.spend(context.remote_id.to_base58(), len(request.keys)):
            return dht_pb2.StoreResponse(store_ok=[False] * len(request.keys), peer=self.node_info)
        return await store(self, request, context)

    async def rpc_find(self, request: dht_pb2.FindRequest, context: P2PContext) -> dht_pb2.FindResponse:
        if not budget.spend(context.remote_id.to_base58(), len(request.keys)):
            return dht_pb2.FindResponse(results=[dht_pb2.FindResult(type=dht_pb2.NOT_FOUND) for _ in request.keys],
                                        peer=self.node_info)
        return await find(self, request, context)

    rpc_store.budgeted = rpc_find.budgeted = True
    DHTProtocol.rpc_store, DHTProtocol.rpc_find = rpc_store, rpc_find
    return budget
