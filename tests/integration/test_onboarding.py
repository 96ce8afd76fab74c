"""Joining as a newcomer would, on 127.0.0.1: a bootstrap that announces a DNS name writes a peers file, peers
that join through it and announce DNS names of their own exchange bundles (the docker-compose addressing);
`swarm node` refuses a GPU that is not there with one line."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ops.cli.network import read_peers
from swarm.host.local import stop_all
from tests.integration.conftest import peer_config
from tests.integration.test_hivemind_transport import _record, _take_until

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_dns_announced_bootstrap_and_peers_exchange_through_a_peers_file(tmp_path):
    from swarm.exchange.hivemind import HivemindTransport
    from swarm.host.local import Child

    port, peers_file = _free_port(), tmp_path / "peers.txt"
    cmd = [sys.executable, "-m", "ops.cli", "bootstrap", "--host-maddrs", f"/ip4/127.0.0.1/tcp/{port}",
           "--announce-maddrs", f"/dns4/localhost/tcp/{port}", "--identity", str(tmp_path / "boot.key"),
           "--swarm-id", "onboarding", "--maddrs-file", str(peers_file)]
    log = tmp_path / "bootstrap.log"
    with open(log, "wb") as fh:
        boot = Child("bootstrap", subprocess.Popen(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT,
                                                   start_new_session=True), log)
    peers = []
    try:
        found = read_peers(str(peers_file), wait_s=120)
        assert found.swarm_id == "onboarding"
        assert found.maddrs and all(m.startswith(f"/dns4/localhost/tcp/{port}/p2p/") for m in found.maddrs)
        for _ in range(2):
            own = _free_port()
            peers.append(HivemindTransport(cfg=peer_config(
                found.maddrs, swarm_id=found.swarm_id, host_maddrs=[f"/ip4/127.0.0.1/tcp/{own}"],
                announce_maddrs=[f"/dns4/localhost/tcp/{own}"], poll_interval_s=0.2)))
        a, b = peers
        assert all("/dns4/localhost/" in m for m in a.visible_maddrs())
        a.publish([_record(a.peer_id, 0, 3, swarm="onboarding")])
        got = _take_until(b, lambda d: len(d.records) >= 1)
        assert [r.peer for r in got.records] == [a.peer_id] and not got.drops
    finally:
        for p in peers:
            p.shutdown()
        stop_all([boot], grace_s=10)


def test_cuda_asked_for_on_a_machine_without_one_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ops.cli", "node", "--config", "examples/tiny-solo.yaml",
                           "--set", "train.device=cuda", "--out", str(tmp_path / "run")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: train.device is 'cuda' but torch sees no CUDA device")
