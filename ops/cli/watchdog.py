"""The orphan watchdog: a tiny process that cleans up after a CLI process that was killed outright.

`kill -9` (or the OOM killer) gives a process no chance to stop its children: hivemind's DHT
child, the p2pd it started, torch's shm manager, a vLLM engine, or — under `swarm local` — the
node processes themselves would run on, holding ports and identities. `start_watchdog()` runs
`python -m ops.cli.watchdog PID` beside the process PID. Every `INTERVAL_S` it notes PID's
descendants (pid + start time, so a reused pid is never hit) and checks whether PID is still
its parent; once it is not, it sends SIGTERM to every noted descendant that still exists, waits
`GRACE_S`, sends SIGKILL to the rest, and exits. A process that ends normally has already
stopped its children, so the watchdog then finds nothing to do.

The watchdog ignores SIGINT, SIGTERM and SIGHUP, which reach it with its parent's process group
(Ctrl-C, `swarm local` stopping a node): it must outlive the parent to do its job. Linux only
(/proc); elsewhere `start_watchdog` starts nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from swarm.host.health import Proc, alive, descendants, read_proc

INTERVAL_S = 1.0
GRACE_S = 3.0


def start_watchdog() -> subprocess.Popen | None:
    """Start the watchdog of this process (None where /proc is missing)."""
    if not os.path.isdir("/proc/self"):
        return None
    return subprocess.Popen([sys.executable, "-m", "ops.cli.watchdog", str(os.getpid())],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, close_fds=True)


def watch(parent: int, interval_s: float = INTERVAL_S, grace_s: float = GRACE_S) -> list[Proc]:
    """Block while `parent` lives (as our parent); then stop its remaining descendants. Returns them."""
    me = os.getpid()
    noted: dict[tuple[int, int], Proc] = {}
    while os.getppid() == parent:
        for p in descendants(parent):
            if p.pid != me:
                noted[(p.pid, p.start)] = p
        noted = {k: p for k, p in noted.items() if alive(p)}
        time.sleep(interval_s)
    left = [p for p in noted.values() if alive(p)]
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 0.0)):
        for p in left:
            if alive(p):
                try:
                    os.kill(p.pid, sig)
                except OSError:
                    pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(alive(p) for p in left):
            time.sleep(0.05)
    return left


def main(argv: list[str]) -> int:
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    parent = int(argv[0])
    if read_proc(parent) is None:
        return 0
    watch(parent)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
