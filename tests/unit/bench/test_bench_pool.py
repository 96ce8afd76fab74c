"""bench.harness.pool: a runner killed with -9 leaves no worker behind (a killed SmolLM2 sharing run left two
workers of ≈ 9 GB computing on for an hour, and a restarted run then refused for want of memory)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
RUNNER = '''
import os, sys, time
from pathlib import Path
from bench.harness.pool import run_jobs

def job(out):
    Path(out, str(os.getpid())).write_text("started")
    time.sleep(600)
    return {}

if __name__ == "__main__":
    run_jobs(job, [sys.argv[1]] * 2, Path(sys.argv[1], "sink.jsonl"), 2, str)
'''


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_workers_die_with_their_runner(tmp_path):
    (tmp_path / "runner.py").write_text(RUNNER)
    runner = subprocess.Popen([sys.executable, str(tmp_path / "runner.py"), str(tmp_path)], cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.DEVNULL)
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 240  # two spawned interpreters importing the harness, on a busy machine
        while len(pids) < 2 and time.monotonic() < deadline:
            pids = [int(p.name) for p in tmp_path.iterdir() if p.name.isdigit()]
            time.sleep(0.2)
        assert len(pids) == 2, "the workers did not start"
        runner.kill()
        runner.wait(30)
        deadline = time.monotonic() + 60
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [p for p in pids if _alive(p)], "workers outlived their runner"
    finally:
        runner.kill()
        for p in pids:
            if _alive(p):
                os.kill(p, 9)
