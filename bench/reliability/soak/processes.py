"""The soak's processes: each role a process group pinned to one core (started, ended by signal, its leftovers
reaped), a throttle that pauses one for a while, the RSS and CPU seconds of a process tree by part, and the
address a role prints once it listens."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CLK_TCK = os.sysconf("SC_CLK_TCK")  # /proc/PID/stat counts CPU time in these
_MADDR = re.compile(r"^(/ip4/\S+/p2p/\S+)$", re.M)


class Role:
    """One process that may live several lives (kill -9 + restart, leave + rejoin)."""

    def __init__(self, name: str, cmd: list[str], log: Path, core: int = 0):
        self.name, self.cmd, self.log, self.core = name, cmd, log, core
        self.proc: subprocess.Popen | None = None
        self.lives: list[dict] = []

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as fh:  # core 0, as this process (and, inherited, all that the child starts)
            self.proc = subprocess.Popen(self.cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT,
                                         start_new_session=True,
                                         preexec_fn=lambda: os.sched_setaffinity(0, {self.core % os.cpu_count()}),
                                         env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})
        self.lives.append({"pid": self.proc.pid, "start": time.time(), "end": None, "how": None})
        self.rows_at_start = len(metrics_rows(self.log.parent))  # a node has finished a round once this grows

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def end(self, how: str, sig: int, wait_s: float = 60.0) -> None:
        """Signal the main process (SIGKILL: the main process alone; others: the whole group)."""
        if not self.alive():
            return
        try:
            os.kill(self.proc.pid, signal.SIGCONT)  # a throttled process must run to stop
            if sig == signal.SIGKILL:
                os.kill(self.proc.pid, sig)
            else:
                os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            how += "+sigkill_after_timeout"
        self.lives[-1].update(end=time.time(), how=how, rc=self.proc.returncode)

    def group_left(self) -> list[int]:
        """Processes still in this life's process group (children the main process left behind)."""
        if self.proc is None:
            return []
        out = []
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    if os.getpgid(int(d.name)) == self.proc.pid:
                        out.append(int(d.name))
                except (ProcessLookupError, PermissionError):
                    pass
        return out

    def reap_group(self) -> list[int]:
        left = self.group_left()
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return left


class Throttle(threading.Thread):
    """Lets a role's main process run FRACTION of each PERIOD_S (SIGSTOP / SIGCONT) while `active` is set."""

    FRACTION, PERIOD_S = 0.1, 1.0

    def __init__(self, role: Role):
        super().__init__(daemon=True)
        self.role, self.active, self.done = role, threading.Event(), threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            proc = self.role.proc
            if not (self.active.is_set() and self.role.alive()):
                self.done.wait(0.2)
                continue
            try:
                os.kill(proc.pid, signal.SIGSTOP)
                self.done.wait(self.PERIOD_S * (1 - self.FRACTION))
                os.kill(proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                continue
            self.done.wait(self.PERIOD_S * self.FRACTION)

    def pause(self) -> None:
        """Stop throttling and leave the process running."""
        self.active.clear()
        time.sleep(self.PERIOD_S + 0.2)
        if self.role.alive():
            os.kill(self.role.proc.pid, signal.SIGCONT)


def rss_tree_mb(pid: int) -> dict[str, float] | None:
    """VmRSS of pid and all its descendants in MB, by part: "main" (pid), "p2pd", "child" (others: the DHT
    process), "total"; and under "cpu_s" the CPU seconds (user + system) each part has used so far. None when
    pid is gone."""
    parts = {"main": 0.0, "child": 0.0, "p2pd": 0.0}
    cpu = {"main": 0.0, "child": 0.0, "p2pd": 0.0}
    stack, seen = [pid], set()
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            status = Path(f"/proc/{p}/status").read_text()
            kb = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
            name = next((line.split()[1] for line in status.splitlines() if line.startswith("Name:")), "")
            part = "main" if p == pid else ("p2pd" if name.startswith("p2pd") else "child")
            parts[part] += kb / 1024
            stat = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            cpu[part] += (int(stat[11]) + int(stat[12])) / CLK_TCK  # utime, stime (fields 14, 15)
            for task in Path(f"/proc/{p}/task").iterdir():
                stack += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
            if p == pid:
                return None
    return {**{k: round(v, 2) for k, v in parts.items()}, "total": round(sum(parts.values()), 2),
            "cpu_s": {k: round(v, 2) for k, v in cpu.items()}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_maddr(role: Role, since: int, timeout: float = 300) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = _MADDR.search(role.log.read_bytes()[since:].decode(errors="replace"))
        if m:
            return m.group(1)
        if not role.alive():
            raise RuntimeError(f"{role.name} exited: {role.log.read_text()[-2000:]}")
        time.sleep(0.5)
    raise RuntimeError(f"{role.name} printed no address in {timeout} s")


def metrics_rows(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # a line cut by kill -9 (metrics are fsync'd per line, so at most the last one)
    return rows
