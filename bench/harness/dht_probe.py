"""Counters inside real hivemind DHT processes and timers around the transport's DHT reads.

For the workers of bench/harness/peers.py (bench/exchange/gossip.py, bench/exchange/capacity.py): `install()`
wraps hivemind's `DHTProtocol.rpc_find` / `rpc_store` at class level before any DHT starts; hivemind's DHT is a
fork of the process that starts it, so every DHT child then counts what it serves, in its own memory:
requests, keys asked and response bytes (the protobuf payload, without libp2p's framing).
`served(dht)` reads one child's counters. `time_reads(transport, log)` times each poll read of the
transport (`swarm.dht.peer.read_keys` through `DHT.run_coroutine`) from the request to its answer in the
transport's process and logs [peer, seconds, keys asked, entries returned].

What a key holder serves includes the routing part of every lookup (the nearest peers it names),
which is what a holder pays for being one.
"""

from __future__ import annotations

import time

from hivemind.dht import protocol as _protocol
from hivemind.p2p import P2PContext
from hivemind.proto import dht_pb2

SERVED = {"find_requests": 0, "find_keys": 0, "find_bytes": 0, "store_requests": 0, "store_keys": 0}


def install() -> None:
    """Count what every DHT started from this process from now on serves (idempotent)."""
    cls = _protocol.DHTProtocol
    if getattr(cls, "_probe_installed", False):
        return
    if cls._rpc_handlers is not None:
        raise RuntimeError("install() must run before the first DHT of this process starts")
    find, store = cls.rpc_find, cls.rpc_store

    async def rpc_find(self, request: dht_pb2.FindRequest, context: P2PContext) -> dht_pb2.FindResponse:
        response = await find(self, request, context)
        SERVED["find_requests"] += 1
        SERVED["find_keys"] += len(request.keys)
        SERVED["find_bytes"] += response.ByteSize()
        return response

    async def rpc_store(self, request: dht_pb2.StoreRequest, context: P2PContext) -> dht_pb2.StoreResponse:
        SERVED["store_requests"] += 1
        SERVED["store_keys"] += len(request.keys)
        return await store(self, request, context)

    cls.rpc_find, cls.rpc_store = rpc_find, rpc_store
    cls._probe_installed = True


async def _read_served(_dht, _node) -> dict:
    return {**SERVED, "t": time.monotonic()}


def served(dht) -> dict:
    """One DHT child's counters so far, with the monotonic time they were read at."""
    return dht.run_coroutine(_read_served)


def time_reads(transport, log: list) -> None:
    """Time every poll read of `transport` (appends [peer, seconds, keys, entries] to `log`)."""
    from swarm.dht.peer import read_keys

    dht = transport.dht
    run = dht.run_coroutine

    def run_coroutine(coro, return_future=False):
        fut = run(coro, return_future=return_future)
        if not (return_future and getattr(coro, "func", None) is read_keys):
            return fut
        started, keys = time.monotonic(), len(coro.keywords.get("keys", ()))

        async def timed():
            found = await fut
            entries = sum(len(v[1]) if isinstance(v, tuple) else len(v) for v in found.values())
            log.append([transport.peer_id, time.monotonic() - started, keys, entries])
            return found

        return timed()

    dht.run_coroutine = run_coroutine
