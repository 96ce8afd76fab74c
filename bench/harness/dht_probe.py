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


# ---------------------------------------------------------------- what a DHT child keeps (bench/reliability/dht_memory.py)

_TRACE_BASE: list = []  # in a traced DHT child: the tracemalloc snapshot later ones are compared with


def _storage(st) -> dict:
    """Keys, entries (a dictionary value's subkeys), value bytes and expiration-heap entries of a hivemind
    DHTLocalStorage, read as it is (expired entries that no access has removed yet are counted)."""
    from hivemind.dht.storage import DictionaryDHTValue

    keys = entries = nbytes = 0
    heap = len(st.expiration_heap)
    for value, _exp in list(st.data.values()):
        keys += 1
        if isinstance(value, DictionaryDHTValue):
            entries += len(value.data)
            heap += len(value.expiration_heap)
            nbytes += sum(len(sub) + len(v.value) for sub, v in list(value.data.items()))
        else:
            entries += 1
            nbytes += len(value)
    return {"keys": keys, "entries": entries, "bytes": nbytes, "heap": heap}


def _mallinfo() -> dict:
    """glibc's mallinfo2 in MiB: arena (heap obtained by brk), in_use / free in it, mmapped (large blocks)."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                    "fsmblks", "uordblks", "fordblks", "keepcost")]
    try:
        f = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return {}
    f.restype = MallInfo2
    m = f()
    mib = 2 ** 20
    return {"arena": m.arena / mib, "in_use": m.uordblks / mib, "free": m.fordblks / mib, "mmapped": m.hblkhd / mib}


def _pymalloc() -> dict:
    """pymalloc's arenas in MiB (allocated now, and the most ever at once) and the bytes in its allocated blocks,
    from sys._debugmallocstats (which writes to fd 2: redirected to a file for the call)."""
    import os
    import re
    import sys
    import tempfile

    with tempfile.TemporaryFile() as f:
        saved = os.dup(2)
        try:
            os.dup2(f.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        text = f.read().decode(errors="replace")
    out = {}
    for name, pattern in (("arenas_now", r"# arenas allocated current\s*=\s*([\d,]+)"),
                          ("arenas_peak", r"# arenas highwater mark\s*=\s*([\d,]+)"),
                          ("blocks_bytes", r"# bytes in allocated blocks\s*=\s*([\d,]+)")):
        m = re.search(pattern, text)
        if m:
            out[name] = int(m.group(1).replace(",", ""))
    arena = 1 << 20  # pymalloc's arena size on 3.10+ (64-bit)
    return {"arenas_mib": out.get("arenas_now", 0) * arena / 2 ** 20, "arenas_peak_mib": out.get("arenas_peak", 0)
            * arena / 2 ** 20, "blocks_mib": out.get("blocks_bytes", 0) / 2 ** 20}


def _proc_status() -> dict:
    from pathlib import Path

    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM", "Threads"):
            v = int(rest.split()[0])
            out[name] = v if name == "Threads" else round(v / 1024, 2)
    return out


async def child_memory(_dht, node, top: int = 12) -> dict:
    """Runs inside a DHT child: what it keeps — its storage and cache (keys, entries, bytes), the routing table,
    hivemind's pending searches (and the keys it keeps an entry for), the served calls its p2pd client files, its
    blacklist, cache refreshes, asyncio tasks, Python objects, pymalloc and glibc malloc, /proc/self/status, and
    (a node's DHT process) what swarm.dht.holdings holds and refused and what swarm.dht.leaks removed; in a child
    that runs tracemalloc, the `top` source lines whose traced bytes grew most since the first call (and the
    traced total)."""
    import asyncio
    import gc
    import sys
    import tracemalloc

    proto = node.protocol
    rt = proto.routing_table
    out = {"t": time.monotonic(), "storage": _storage(proto.storage), "cache": _storage(proto.cache),
           "routing_peers": len(rt.uid_to_peer_id),
           "routing_replacements": sum(len(b.replacement_nodes) for b in rt.buckets),
           "pending_gets": sum(len(v) for v in node.pending_get_requests.values()),
           "pending_get_keys": len(node.pending_get_requests),  # keys hivemind keeps a (maybe empty) entry for
           "blacklist": [len(node.blacklist.banned_peers.data), len(node.blacklist.ban_counter)],
           "cache_refresh_queue": len(node.cache_refresh_queue),
           "tasks": len(asyncio.all_tasks()), "gc_objects": len(gc.get_objects()),
           "blocks": sys.getallocatedblocks(), "malloc": _mallinfo(), "pymalloc": _pymalloc(),
           "status": _proc_status(), "calls_filed": len(node.p2p._client.control._handler_tasks)}
    from swarm.dht import holdings, leaks

    if holdings.holdings is not None:  # a node's DHT process since swarm.dht.holdings
        out["holdings"] = holdings.holdings.stats()
    out["leaks"] = {"pruned_keys": leaks.pruned_keys, "dropped_calls": leaks.dropped_calls}
    if tracemalloc.is_tracing():
        snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        out["traced_mib"] = tracemalloc.get_traced_memory()[0] / 2 ** 20
        if not _TRACE_BASE:
            _TRACE_BASE.append(snap)
        diff = snap.compare_to(_TRACE_BASE[0], "lineno")
        out["grown"] = [[f"{s.traceback[0].filename.split('site-packages/')[-1]}:{s.traceback[0].lineno}",
                         round(s.size_diff / 2 ** 20, 3), s.count_diff] for s in diff[:top]]
    return out
