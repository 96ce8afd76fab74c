"""`swarm doctor` as a user runs it, against a real swarm on 127.0.0.1 (a bootstrap peer and two nodes'
transports that have announced): all good, an announced address nobody answers on, a wrong swarm id, a
peer whose announcement can be seen but whose bundles cannot be fetched."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from swarm.exchange.hivemind import HivemindTransport
from tests.integration.conftest import peer_config, transport_swarm
from tests.integration.test_hivemind_transport import _record

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def swarm2():
    with transport_swarm(2, poll_interval_s=0.2) as (maddrs, peers):
        for i, p in enumerate(peers):
            p.publish([_record(p.peer_id, 0, i)])
        yield maddrs


def _doctor(maddrs: list[str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ops.cli", "doctor", "--initial-peers", maddrs[0],
                           "--listen", "3", *args], cwd=ROOT, capture_output=True, text=True, timeout=180)


def _line(out: str, name: str) -> str:
    return next(line for line in out.splitlines() if line.strip()[2:].startswith(name))


def test_all_good(swarm2, tmp_path):
    proc = _doctor(swarm2, "--identity", str(tmp_path / "node.key"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("bootstrap", "reachability", "clock", "swarm", "fetch"):
        assert _line(proc.stdout, name).strip().startswith("✓"), proc.stdout
    assert "a bundle stream opens to each of the 2 peer(s) that announced" in proc.stdout
    assert "2 node(s) of swarm 'rlswarm' (protocol v2) answered" in proc.stdout
    assert "all checks passed" in proc.stdout


def test_an_announced_address_nobody_answers_on(swarm2):
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = _doctor(swarm2, "--announce-maddrs", f"/ip4/127.0.0.1/tcp/{port}")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = _line(proc.stdout, "reachability")
    assert line.strip().startswith("✗") and f"/ip4/127.0.0.1/tcp/{port}" in line
    assert "fix: announce the address peers can dial" in proc.stdout
    assert _line(proc.stdout, "swarm").strip().startswith("✓")  # the rest still works


def test_a_wrong_swarm_id(swarm2):
    proc = _doctor(swarm2, "--swarm-id", "someone-else")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = _line(proc.stdout, "swarm")
    assert line.strip().startswith("✗") and "run swarm 'rlswarm'" in line and "'someone-else'" in line
    assert "--swarm-id rlswarm" in proc.stdout


def test_no_initial_peers_and_an_unreachable_bootstrap():
    proc = subprocess.run([sys.executable, "-m", "ops.cli", "doctor"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1 and "no initial peers" in proc.stdout
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = f"/ip4/127.0.0.1/tcp/{port}/p2p/QmXTTgNGTxwTVW3QJwHrnUsnE5WebzRS7kziajcqpejbJ4"
    proc = _doctor([dead], "--set", "swarm.startup_timeout_s=5")
    assert proc.returncode == 1 and "none of the initial peers answered" in proc.stdout, proc.stdout + proc.stderr


def test_a_peer_it_can_see_but_not_fetch_from():
    with transport_swarm(1, poll_interval_s=0.2) as (maddrs, (live,)):
        live.publish([_record(live.peer_id, 0, 1)])
        gone = HivemindTransport(cfg=peer_config(maddrs[:1], poll_interval_s=0.2))
        gone.publish([_record(gone.peer_id, 0, 2)])
        gone.shutdown()  # its announcement stays in the DHT for max_age_s; nothing serves the bundle any more
        proc = _doctor(maddrs)
    line = _line(proc.stdout, "fetch")
    assert line.strip().startswith("!"), proc.stdout + proc.stderr  # one of two peers can be fetched from
    assert "1 of 2 peer(s) announced bundles but cannot be fetched from" in line and gone.peer_id in line
    assert live.peer_id not in line
    assert "fix: such a peer must listen on an address this machine can dial" in proc.stdout
