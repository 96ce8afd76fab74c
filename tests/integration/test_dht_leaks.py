"""A node's DHT process keeps nothing of a key once its reads of it are done, nor of a call its caller cancelled
(swarm.dht.leaks; docs/benchmarks/reliability.md §15I), over a node's DHT peer as a node starts it (swarm.dht.peer.start_swarm_dht)
and real peers on 127.0.0.1.

- hivemind's DHTNode filed every get under its key in `pending_get_requests` and never removed the key (≈ 1.8 KB for
  every key a node ever read): reads of 240 distinct keys — found and not found, in batches, and two concurrent gets
  of one key that share a search — answer as before and leave no key behind (before: 240 keys stayed).
- hivemind's p2pd client kept the task of every incoming call whose caller cancelled it (≈ 7 KiB each): 12 finds a
  peer gives up on leave nothing behind (before: 12 tasks stayed), nor does a call cancelled before it ran.
- hivemind merged what a read found at other replicas into the reader's own stored dictionary: 20 reads of a key
  the node holds with 1 entry, another replica with 50, find all 51 each time and leave the node's own value as it
  was (before: 51 entries and 1,001 expiration-heap entries in the node's storage).
"""

from __future__ import annotations

import asyncio
import time
from functools import partial

import pytest

from hivemind import DHT
from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.routing import DHTID
from hivemind.p2p import P2PContext
from hivemind.proto import dht_pb2
from hivemind.utils.serializer import MSGPackSerializer

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
        assert dht.run_coroutine(_kept) == (0, 0)  # before swarm.dht.leaks: (240, 0)
    finally:
        dht.shutdown()
        boot.shutdown()


async def _calls_kept(_dht, node) -> tuple[int, int]:
    """(served calls hivemind's p2pd client still files, those of them still running), inside the DHT process."""
    tasks = node.p2p._client.control._handler_tasks.values()
    return len(tasks), sum(not t.done() for t in tasks)


def _settled(dht, timeout_s: float = 60.0) -> int:
    """The calls still filed once none is running (the node's slow finds take 1.5 s each)."""
    deadline = time.monotonic() + timeout_s
    while (kept := dht.run_coroutine(_calls_kept))[1] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert kept[1] == 0, kept
    return kept[0]


async def _finds_given_up(_dht, node, peer: str, n: int) -> list:
    """`n` finds to `peer`, each given up on after the caller's wait_timeout (inside the caller's DHT process)."""
    from hivemind.p2p import PeerID

    return [await node.protocol.call_find(PeerID.from_base58(peer), [DHTID.generate(source=f"gone-{i}")])
            for i in range(n)]


async def _cancelled_before_it_ran(_dht, node) -> bool:
    """Inside the DHT process: file a call's task as hivemind's p2pd client does, the daemon's cancel arriving
    before the task ever ran (no code of its coroutine runs then); is it still filed once it has ended?"""
    import uuid

    tasks = node.p2p._client.control._handler_tasks
    call_id, task = uuid.uuid4(), asyncio.ensure_future(asyncio.sleep(10))
    tasks[call_id] = task
    task.cancel()
    await asyncio.sleep(0.05)
    return call_id in tasks


def test_calls_a_peer_gives_up_on_leave_nothing_behind(monkeypatch):
    find = DHTProtocol.rpc_find

    async def slow_find(self, request: dht_pb2.FindRequest, context: P2PContext) -> dht_pb2.FindResponse:
        # the node's DHT process (forked below) answers every find late
        await asyncio.sleep(1.5)
        return await find(self, request, context)

    monkeypatch.setattr(DHTProtocol, "rpc_find", slow_find)
    dht, _, _ = start_swarm_dht(SwarmConfig(enabled=True, initial_peers=[], startup_timeout_s=120))
    caller = None
    try:
        caller = DHT(start=True, initial_peers=[str(m) for m in dht.get_visible_maddrs()], wait_timeout=0.3,
                     host_maddrs=["/ip4/127.0.0.1/tcp/0"], startup_timeout=120)
        before = _settled(dht)  # the caller's own start-up calls
        answers = caller.run_coroutine(partial(_finds_given_up, peer=dht.peer_id.to_base58(), n=12))
        assert answers == [None] * 12  # each timed out on the caller's side, which cancels the call
        assert (before, _settled(dht)) == (0, 0)  # before swarm.dht.leaks: (1, 13)
        assert dht.run_coroutine(_cancelled_before_it_ran) is False  # with the first fix alone: True
    finally:
        if caller is not None:
            caller.shutdown()
        dht.shutdown()


async def _hold(_dht, node, key: str, names: list) -> None:
    """Inside a DHT process: hold an entry under `key` for each name, as if peers had stored them there."""
    key_id = DHTID.generate(source=key)
    for name in names:
        node.protocol.storage.store_subkey(key_id, name, MSGPackSerializer.dumps(f"value of {name}"), time.time() + 600)


async def _stored(_dht, node, key: str) -> tuple[int, int]:
    """Inside a DHT process: (entries, expiration-heap entries) of the value it holds under `key`."""
    value = node.protocol.storage.data[DHTID.generate(source=key)].value
    return len(value.data), len(value.expiration_heap)


async def _read(_dht, node, key: str) -> int:
    """Inside a DHT process: the entries a read of `key` finds (its own and every replica's)."""
    found = await node.get(key, latest=True)
    return len(found.value)


def test_reads_leave_the_readers_own_stored_value_as_it_was():
    a, _, _ = start_swarm_dht(SwarmConfig(enabled=True, initial_peers=[], startup_timeout_s=120))
    b = None
    try:
        b, _, _ = start_swarm_dht(SwarmConfig(enabled=True, initial_peers=[str(m) for m in a.get_visible_maddrs()],
                                              startup_timeout_s=120))
        a.run_coroutine(partial(_hold, key="shared", names=["own"]))
        b.run_coroutine(partial(_hold, key="shared", names=[f"other-{i}" for i in range(50)]))
        assert [a.run_coroutine(partial(_read, key="shared")) for _ in range(20)] == [51] * 20
        assert a.run_coroutine(partial(_stored, key="shared")) == (1, 1)  # before swarm.dht.leaks: (51, 1001)
    finally:
        if b is not None:
            b.shutdown()
        a.shutdown()
