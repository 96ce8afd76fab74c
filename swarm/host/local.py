"""Process plumbing for a local multi-node swarm on 127.0.0.1 (`swarm local`).

One bootstrap process (``swarm bootstrap`` on loopback), then one ``swarm node`` process per node,
each with its own log file. This module knows nothing about models or metrics: ``ops/cli/local.py``
decides what each node runs and what the user sees. Ctrl-C (or any error) stops every child:
SIGINT first so nodes finish their checkpoint writes, SIGKILL after a grace period.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

_MADDR = re.compile(r"^/ip4/\S+/p2p/\S+$")


class LaunchError(RuntimeError):
    """A child process could not be started or died before it was ready."""


@dataclass
class Child:
    name: str
    proc: subprocess.Popen
    log: Path
    returncode: int | None = field(default=None)

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.proc.poll()
        return self.returncode


def _python_cli() -> list[str]:
    return [sys.executable, "-m", "ops.cli"]


def start_bootstrap(log: Path, *, startup_timeout_s: float = 60.0, swarm_id: str = "rlswarm",
                    gossip: bool = True) -> tuple[Child, list[str]]:
    """Start `swarm bootstrap` on loopback (relaying the swarm's gossip unless `gossip` is False) and return it with
    the multiaddrs it printed."""
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = _python_cli() + ["bootstrap", "--host-maddrs", "/ip4/127.0.0.1/tcp/0",
                           "--startup-timeout", str(startup_timeout_s), "--swarm-id", swarm_id,
                           "--gossip" if gossip else "--no-gossip"]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=fh, start_new_session=True)
    child = Child("bootstrap", proc, log)
    maddrs: list[str] = []
    deadline = time.monotonic() + startup_timeout_s + 30
    with open(log, "ab") as out:
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:  # EOF: the process died
                break
            out.write(line)
            out.flush()
            text = line.decode(errors="replace").strip()
            if _MADDR.match(text):  # one loopback address is all the nodes need
                maddrs.append(text)
                break
    if not maddrs:
        stop_all([child], grace_s=1.0)
        raise LaunchError(f"the bootstrap peer printed no address (see {log})")
    _drain_to(proc, log)
    return child, maddrs


def _drain_to(proc: subprocess.Popen, log: Path) -> None:
    """Keep copying a child's stdout into its log in a background thread (a full pipe would block it)."""
    import threading

    def pump():
        with open(log, "ab") as out:
            for line in proc.stdout:
                out.write(line)
                out.flush()

    threading.Thread(target=pump, daemon=True).start()


def start_node(name: str, config: str, out_dir: Path, extra_args: list[str], env: dict | None = None,
               niceness: int = 0, cpus: set[int] | None = None) -> Child:
    """Start `swarm node --config … --out out_dir …`, stdout and stderr into out_dir/node.log
    (`niceness` > 0: at a lower CPU priority; `cpus`: pinned to these CPU cores, with every process
    it starts — e.g. a slow peer that must not take a fast one's CPU, as if on other hardware)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    log = out_dir / "node.log"
    cmd = _python_cli() + ["node", "--config", config, "--out", str(out_dir)] + extra_args

    def setup() -> None:  # in the child, before exec: inherited by the DHT process and p2pd it starts
        if niceness:
            os.nice(niceness)
        if cpus:
            os.sched_setaffinity(0, cpus)

    with open(log, "ab") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, **(env or {})},
                                preexec_fn=setup if niceness or cpus else None)
    return Child(name, proc, log)


def stop_all(children: list[Child], *, grace_s: float = 20.0) -> None:
    """SIGINT every live child, wait up to grace_s, then SIGKILL what is left."""
    for c in children:
        if c.poll() is None:
            try:
                os.killpg(c.proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace_s
    for c in children:
        while c.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if c.poll() is None:
            try:
                os.killpg(c.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            c.proc.wait()
            c.returncode = c.proc.returncode


def tail_lines(log: Path, n: int = 5) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""
