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
# fast polls; fetch_timeout_s stays the default: a fetch or an offer that outlasts it is given up for good (the
# peer is backed off and that bundle is not fetched again), so a bound of a few seconds made a daemon that a busy
# machine stalled that long fail the test, with one of the two bundles missing
FAST = {"poll_interval_s": 0.2}
WAIT_S = 120.0  # the deadline for each event waited for (they take well under a second on an idle machine)


async def _dial_from_a_stranger(maddrs: list[str], reachable: str, unreachable: str, tries: int = 5) -> tuple[str, str]:
    """One fresh peer that joined through the bootstrap (and knows nothing else: libp2p's routing must find each
    address) dials `reachable` until it connects (its routing table may still be empty at first) or WAIT_S passes,
    then `unreachable` `tries` times 1 s apart; (the last error of each, "" for a connection)."""
    stranger = await P2P.create(initial_peers=maddrs, dht_mode="client")

    async def dial(peer_id: str) -> str:
        try:
            await asyncio.wait_for(stranger._client.connect(PeerID.from_base58(peer_id), []), 15)
            return ""
        except Exception as exc:  # the library's wording differs with the routing table's state
            return repr(exc) or type(exc).__name__

    try:
        deadline = time.monotonic() + WAIT_S
        while (first := await dial(reachable)) and time.monotonic() < deadline:
            await asyncio.sleep(1.0)
        if first:
            return first, ""
        for _ in range(tries):
            if not (second := await dial(unreachable)):
                break
            await asyncio.sleep(1.0)
        return first, second
    finally:
        await stranger.shutdown()


def test_a_node_nobody_can_dial_pushes_its_bundles_and_pulls_theirs():
    with transport_swarm(2, **FAST) as (maddrs, (b, c)):
        a = HivemindTransport(cfg=peer_config(maddrs[:1], client_mode=True, **FAST))
        try:
            _, listening = a.run_on_loop(a.p2p._client.identify(), 10)
            assert list(listening) == [] and a.addrs == ""  # p2pd listens nowhere, and no address is announced
            to_b, to_a = asyncio.run(_dial_from_a_stranger(maddrs[:1], b.peer_id, a.peer_id))
            assert to_b == "", to_b  # a normal peer is found and connected to ...
            assert to_a != "", to_a  # ... a client-mode one never: no connection in 5 tries
            for i, p in enumerate((b, c)):
                p.publish([_record(p.peer_id, 0, i)])
            got = _take_until(a, lambda d: len(d.records) >= 2, timeout=WAIT_S)  # pulled over a's own connections
            assert sorted(r.peer for r in got.records) == sorted([b.peer_id, c.peer_id]) and not got.drops, got
            a.publish([_record(a.peer_id, 1, 7), _record(a.peer_id, 1, 8)])
            for p in (b, c):
                got = _take_until(p, lambda d: sum(r.peer == a.peer_id for r in d.records) >= 2, timeout=WAIT_S)
                assert sorted(r.task.index for r in got.records if r.peer == a.peer_id) == [7, 8], got
                assert p.peers_seen() >= 1 and not got.drops
            deadline = time.monotonic() + WAIT_S  # the receivers may decode the bytes before the offers return
            while sum(a.pusher.stats.values()) < 2 and time.monotonic() < deadline:
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
