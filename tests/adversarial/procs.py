"""Real `swarm bootstrap` and `swarm node` processes for the process-lifetime tests.

Everything is started as `python -m ops.cli …` from the repository root (the code under test),
and `Launched.cleanup()` SIGKILLs whatever a test leaves behind, found by psutil (independent
of the code under test), so a failing test does not leak p2pd daemons into the session.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ops.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=kw.pop("timeout", 240), **kw)


@dataclass
class Launched:
    procs: list[subprocess.Popen] = field(default_factory=list)
    seen: dict[int, psutil.Process] = field(default_factory=dict)

    def start(self, args: list[str], log: Path) -> subprocess.Popen:
        with open(log, "wb") as fh:
            proc = subprocess.Popen([sys.executable, "-m", "ops.cli", *args], cwd=ROOT, stdout=fh,
                                    stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def tree(self, proc: subprocess.Popen) -> list[psutil.Process]:
        """The live descendants of `proc` (remembered for cleanup)."""
        try:
            kids = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        for k in kids:
            self.seen[k.pid] = k
        return kids

    def cleanup(self) -> None:
        for p in self.procs:
            self.tree(p)
            if p.poll() is None:
                p.kill()
                p.wait()
        for k in self.seen.values():
            try:
                k.kill()  # psutil checks the process's creation time: a reused pid is not hit
            except psutil.Error:
                pass


def wait_for_text(log: Path, text: str, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.is_file() and text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode} before {text!r}:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.2)
    raise AssertionError(f"no {text!r} within {timeout} s:\n{log.read_text(errors='replace')[-3000:]}")


def start_bootstrap(launched: Launched, tmp: Path) -> tuple[subprocess.Popen, str]:
    log = tmp / "bootstrap.log"
    proc = launched.start(["bootstrap", "--host-maddrs", "/ip4/127.0.0.1/tcp/0", "--startup-timeout", "120"], log)
    wait_for_text(log, "/p2p/", proc)
    maddr = next(line for line in log.read_text().splitlines() if line.startswith("/ip4/127.0.0.1"))
    return proc, maddr


def start_node(launched: Launched, tmp: Path, maddr: str, name: str = "n", *extra: str) -> tuple[subprocess.Popen, Path]:
    log = tmp / f"{name}.log"
    proc = launched.start(["node", "--config", "examples/tiny-swarm.yaml", "--rounds", "1000", "--out", str(tmp / name),
                           "--initial-peers", maddr, "--set", "eval.every=0", "--set", "swarm.wait_s=2",
                           "--set", "swarm.startup_timeout_s=120", "--set", f"swarm.swarm_id=t{abs(hash(str(tmp)))}",
                           *extra], log)
    return proc, log


def gone_within(procs: list[psutil.Process], seconds: float) -> list[psutil.Process]:
    """Those of `procs` still running after `seconds` (zombies count as gone)."""
    deadline = time.monotonic() + seconds
    while True:
        left = []
        for p in procs:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    left.append(p)
            except psutil.NoSuchProcess:
                pass
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)
