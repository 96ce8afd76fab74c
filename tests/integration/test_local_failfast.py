"""`swarm local` fails fast and loud: a node that dies stops the run with its last log lines and a non-zero
exit (or is restarted with --restart N); per-node metrics ports are derived from the config's and printed."""

from __future__ import annotations

import socket
import time

import pytest

from tests.integration.test_local_swarm import _swarm

pytestmark = pytest.mark.integration


def _two_free_ports() -> tuple[socket.socket, int]:
    """A socket holding port P + 1 (bound and listening) where P is free: node 1 cannot serve its metrics."""
    for _ in range(50):
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        base = probe.getsockname()[1]
        probe.close()
        holder = socket.socket()
        try:
            holder.bind(("127.0.0.1", base + 1))
        except OSError:
            holder.close()
            continue
        holder.listen()
        return holder, base
    raise RuntimeError("no two adjacent ports")


@pytest.mark.parametrize("restart", [0, 1])
def test_a_node_that_dies_stops_the_run_with_its_last_lines(tmp_path, restart):
    holder, base = _two_free_ports()
    try:
        started = time.monotonic()
        proc = _swarm("local", "--nodes", "2", "--config", "examples/tiny-swarm.yaml", "--rounds", "1000",
                      "--out", str(tmp_path), "--set", f"metrics.prometheus_port={base}", "--restart", str(restart))
        out, _ = proc.communicate(timeout=600)
        elapsed = time.monotonic() - started
    finally:
        holder.close()
    assert proc.returncode == 1, out[-3000:]
    assert f"tiny-0: metrics on http://127.0.0.1:{base}/metrics" in out
    assert f"tiny-1: metrics on http://127.0.0.1:{base + 1}/metrics" in out
    assert "node tiny-1 exited with code" in out and "last lines of" in out
    assert "is already in use" in out  # the node's own last log line (one line, exit 2), printed by the launcher
    assert out.count("node tiny-1 exited with code") == restart + 1
    if restart:
        assert "restarting tiny-1 (1 of 1)" in out
    assert "stopping every node" in out and "died (exit" in out and "stopped" in out
    assert elapsed < 300  # long before 1000 rounds: nobody waits for the dead node
