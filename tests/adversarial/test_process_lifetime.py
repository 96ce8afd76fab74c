"""Finding 7: a node's processes start and stop as one, whatever stops it.

Before: SIGTERM to `swarm node` (what docker and systemd send) left its DHT child, p2pd and
torch_shm_manager running; kill -9 of a node or of the bootstrap left the DHT child and p2pd;
a node whose DHT child died went on with 0 peer groups; two nodes on one --out interleaved
their metrics. Real processes, real hivemind peers on 127.0.0.1.
"""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from tests.adversarial.procs import (
    Launched,
    cli,
    gone_within,
    start_bootstrap,
    start_node,
    wait_for_text,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def launched():
    started = Launched()
    yield started
    started.cleanup()


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory):
    started = Launched()
    try:
        yield start_bootstrap(started, tmp_path_factory.mktemp("boot"))[1]
    finally:
        started.cleanup()


def _running_node(launched, tmp_path, maddr, name="n"):
    proc, log = start_node(launched, tmp_path, maddr, name)
    wait_for_text(log, "round    0", proc)  # the DHT child, p2pd and the watchdog are all up by now
    kids = launched.tree(proc)
    assert any(k.name() == "p2pd" for k in kids), [k.name() for k in kids]
    return proc, log, kids


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_the_node_and_every_child(launched, bootstrap, tmp_path, sig, code):
    proc, log, kids = _running_node(launched, tmp_path, bootstrap)
    proc.send_signal(sig)
    assert proc.wait(60) == code, log.read_text()[-2000:]
    left = gone_within(kids, 60)  # returns as soon as they are gone; a leak still fails
    assert not left, [(p.pid, p.name()) for p in left]


def test_kill9_of_a_node_leaves_no_orphans(launched, bootstrap, tmp_path):
    proc, _, kids = _running_node(launched, tmp_path, bootstrap)
    proc.kill()
    proc.wait(60)
    left = gone_within(kids, 60)
    assert not left, [(p.pid, p.name()) for p in left]


def test_kill9_of_the_bootstrap_leaves_no_orphans(launched, tmp_path):
    boot, _ = start_bootstrap(launched, tmp_path)
    kids = launched.tree(boot)
    assert any(k.name() == "p2pd" for k in kids)
    time.sleep(1.5)  # one watchdog tick has noted them
    boot.kill()
    boot.wait(60)
    left = gone_within(kids, 60)
    assert not left, [(p.pid, p.name()) for p in left]


@pytest.mark.parametrize("victim", ["dht_child", "p2pd"])
def test_a_dead_dht_child_or_p2pd_stops_the_node_with_one_line(launched, bootstrap, tmp_path, victim):
    proc, log, kids = _running_node(launched, tmp_path, bootstrap)
    p2pd = next(k for k in kids if k.name() == "p2pd")
    target = p2pd if victim == "p2pd" else psutil.Process(p2pd.ppid())
    assert target.pid != proc.pid
    os.kill(target.pid, signal.SIGKILL)
    assert proc.wait(120) == 3, log.read_text()[-2000:]
    last = log.read_text().strip().splitlines()[-1]
    assert last.startswith("error: the swarm's ") and "died" in last, last
    left = gone_within(kids, 60)
    assert not left, [(p.pid, p.name()) for p in left]


def test_a_second_node_on_the_same_out_exits_2(launched, bootstrap, tmp_path):
    proc, log, _ = _running_node(launched, tmp_path, bootstrap)
    second = cli("node", "--config", "examples/tiny-solo.yaml", "--out", str(tmp_path / "n"), timeout=120)
    assert second.returncode == 2, second.stderr
    assert second.stderr.count("\n") == 1 and "in use by another process" in second.stderr
    assert f"pid {proc.pid}" in second.stderr
    assert proc.poll() is None  # the first node is untouched
