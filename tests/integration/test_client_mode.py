"""A node that accepts no inbound connections (client mode: p2pd listens on no address, the DHT as a
client) still takes part, by the designed path (docs/PROTOCOL.md §6.3): it pulls peers' bundles over
its own outbound connections and offers its own, with their bytes, to the peers it has seen; each
receiver takes them under its own fan-in budget. Real hivemind peers and real node processes on
127.0.0.1."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest
from hivemind.p2p import P2P, PeerID

from swarm.exchange.hivemind import HivemindTransport
from tests.integration.conftest import peer_config, transport_swarm
from tests.integration.test_hivemind_transport import _record, _take_until
from tests.integration.test_open_swarm import (
    _config,
    _peer_id,
    _rows,
    _start,
    _wait_rounds,
)

pytestmark = pytest.mark.integration
FAST = {"poll_interval_s": 0.2, "fetch_timeout_s": 5}


async def _connect_from_a_stranger(maddrs: list[str], peer_ids: list[str], tries: int = 5) -> dict[str, str]:
    """peer id → "" when one fresh peer that joined through the bootstrap (and knows nothing else: libp2p's
    routing must find each address) opens a connection to it within `tries` tries 1 s apart, else the last
    error. Peers are tried in order, by the same stranger: a fresh stranger's routing table may still be
    empty at first, so a reachable peer first shows that its routing works before an unreachable one."""
    stranger = await P2P.create(initial_peers=maddrs, dht_mode="client")
    out = {}
    try:
        for peer_id in peer_ids:
            for _ in range(tries):
                try:
                    await asyncio.wait_for(stranger._client.connect(PeerID.from_base58(peer_id), []), 15)
                    out[peer_id] = ""
                    break
                except Exception as exc:  # the library's wording differs with the routing table's state
                    out[peer_id] = repr(exc) or type(exc).__name__
                    await asyncio.sleep(1.0)
        return out
    finally:
        await stranger.shutdown()


def test_a_node_nobody_can_dial_pushes_its_bundles_and_pulls_theirs():
    with transport_swarm(2, **FAST) as (maddrs, (b, c)):
        a = HivemindTransport(cfg=peer_config(maddrs[:1], client_mode=True, **FAST))
        try:
            _, listening = a.run_on_loop(a.p2p._client.identify(), 10)
            assert list(listening) == [] and a.addrs == ""  # p2pd listens nowhere, and no address is announced
            dialled = asyncio.run(_connect_from_a_stranger(maddrs[:1], [b.peer_id, a.peer_id]))
            assert dialled[b.peer_id] == "", dialled  # a normal peer is found and connected to ...
            assert dialled[a.peer_id] != "", dialled  # ... a client-mode one never: no connection in 5 tries
            for i, p in enumerate((b, c)):
                p.publish([_record(p.peer_id, 0, i)])
            got = _take_until(a, lambda d: len(d.records) >= 2)  # pulled over connections a opens itself
            assert sorted(r.peer for r in got.records) == sorted([b.peer_id, c.peer_id]) and not got.drops
            a.publish([_record(a.peer_id, 1, 7), _record(a.peer_id, 1, 8)])
            for p in (b, c):
                got = _take_until(p, lambda d: sum(r.peer == a.peer_id for r in d.records) >= 2, timeout=20)
                assert sorted(r.task.index for r in got.records if r.peer == a.peer_id) == [7, 8]
                assert p.peers_seen() >= 1 and not got.drops
            deadline = time.time() + 10  # the receivers may decode the bytes before the offers return
            while sum(a.pusher.stats.values()) < 2 and time.time() < deadline:
                time.sleep(0.1)
            assert a.pusher.stats == Counter({"ok": 2})  # offered to b and c, both took it
            assert a.publish_failures == 0
        finally:
            a.shutdown()


def test_a_client_mode_node_trains_on_the_swarm_and_the_swarm_on_it(bootstrap, tmp_path):
    maddrs, children = bootstrap
    opened, open_out = _start(children, maddrs, tmp_path, "open", _config(tmp_path, "open"))
    _wait_rounds(open_out, 3, 300, opened)  # the open node is publishing
    natd, natd_out = _start(children, maddrs, tmp_path, "natd", _config(tmp_path, "natd"), "--client-mode")
    _wait_rounds(natd_out, 1, 300, natd)
    assert "client mode: no listen address" in (natd_out / "node.log").read_text()
    open_id, natd_id = _peer_id(open_out), _peer_id(natd_out)
    deadline = time.monotonic() + 120
    while not any(open_id in m["external_peers"] for m in _rows(natd_out)):
        assert natd.poll() is None and time.monotonic() < deadline, [m["external_peers"] for m in _rows(natd_out)]
        time.sleep(1.0)
    deadline = time.monotonic() + 120
    while not any(natd_id in m["external_peers"] for m in _rows(open_out)):
        assert time.monotonic() < deadline, [m["external_peers"] for m in _rows(open_out)]
        time.sleep(1.0)
    rows = [m for m in _rows(open_out) if natd_id in m["external_peers"]]
    assert rows[0]["groups_external"] > 0
