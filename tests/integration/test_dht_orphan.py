"""kill -9 of a process leaves its DHT child quiet: no traceback in the log, and the child
gone within seconds without the orphan watchdog.

Before (hivemind's DHT as it is): the child read its broken request pipe and printed "Process DHT-1:
… EOFError", or, when the kill landed mid-request, logged "ConnectionResetError" with its traceback and
then kept running (with its p2pd) until something stopped it — 3 kills of 5 printed a traceback in
this test's setting. swarm.dht.peer.QuietOrphanDHT asks the kernel for SIGTERM when its parent dies and
drops what the broken pipe makes hivemind log once it is an orphan.

The process killed here starts the DHT as a node does (swarm.dht.peer.start_swarm_dht) and sends it requests
without pause, so that kills land both between and inside requests.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
CHILD = """
from swarm.config import SwarmConfig
from swarm.dht.peer import start_swarm_dht
dht, _, _ = start_swarm_dht(SwarmConfig(enabled=True, initial_peers=[], startup_timeout_s=60))
print("ready", flush=True)
while True:
    dht.get("k", latest=True)
"""


def test_kill_9_leaves_no_traceback_and_no_dht_child(tmp_path):
    for i in range(4):
        log = tmp_path / f"run-{i}.log"
        with open(log, "w") as fh:
            proc = subprocess.Popen([sys.executable, "-c", CHILD], cwd=ROOT, stdout=subprocess.PIPE, stderr=fh,
                                    start_new_session=True)
        try:
            assert proc.stdout.readline().strip() == b"ready", log.read_text()[-2000:]
            time.sleep(1.0 + 0.17 * i)  # kills at different points of the request stream
            children = psutil.Process(proc.pid).children(recursive=True)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            _, alive = psutil.wait_procs(children, timeout=60)  # at once when gone; a leak still fails
        finally:
            if proc.poll() is None:
                proc.kill()
        for p in alive:
            p.kill()
        assert not alive, [p.name() for p in alive]  # the DHT child (and the p2pd it stops) did not outlive us
        text = log.read_text()
        assert "Traceback" not in text and "Error" not in text, text[-3000:]
