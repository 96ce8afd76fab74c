"""Hosts for network benches and tests: Linux network namespaces on one virtual switch, made and removed by the user.

    with Hosts(["boot", "a", "b"], subnet="10.231.7") as hosts:   # 10.231.7.1, .2, .3
        proc = hosts.popen("a", [sys.executable, "-m", "ops.cli", ...], stdout=...)
    with Hosts(names, delay_ms={"a": 40, "b": 120}) as hosts:      # a ↔ b: RTT ≈ 160 ms
        hosts.rtt_ms("a", "b")

Without delays a namespace `<tag>sw` holds a bridge; each host is a namespace with its own loopback and one
veth (`eth0`) plugged into that bridge. With `delay_ms` every frame a host sends leaves its `eth0` that many
ms late (± `jitter_ms`), so the RTT between two hosts is the sum of their delays: by `tc qdisc … netem delay`
on `eth0` where the kernel has netem, otherwise by a switch in user space (`python -m bench.harness.netns`,
`switch`): each host's `eth0` is then a tap device, and one process forwards the frames between the taps,
holding each for its sender's delay (frames of one sender keep their order). Either way the hosts reach each
other at their addresses and nothing else: no route leaves the namespaces, and nothing is added to the
machine's own namespace (every interface is created inside them).

Needs root and iproute2 (`ip netns`); `check_available()` raises Unavailable with the reason otherwise (the
tests turn it into a skip: tests/integration/netns.py). On leaving, every process still running in a host's
namespace is killed (by its pid, from `ip netns pids`) and the namespaces are deleted.
"""

from __future__ import annotations

import fcntl
import heapq
import json
import os
import random
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path


class Unavailable(RuntimeError):
    """Network namespaces cannot be made here (the message says why)."""


def ip_binary() -> str | None:
    return shutil.which("ip") or next((p for p in ("/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip") if Path(p).is_file()),
                                      None)


def check_available() -> str:
    """The `ip` binary, or Unavailable with why network namespaces cannot be made here."""
    if os.geteuid() != 0:
        raise Unavailable("network namespaces need root (ip netns); run as root to test across hosts")
    ip = ip_binary()
    if ip is None:
        raise Unavailable("iproute2's `ip` is not installed: cannot make network namespaces")
    probe = f"rsprobe{os.getpid() % 100000}"
    made = subprocess.run([ip, "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        raise Unavailable(f"`ip netns add` fails here: {made.stderr.strip()[:200]}")
    subprocess.run([ip, "netns", "delete", probe], capture_output=True)
    return ip


def netem_available(ip: str) -> bool:
    """Whether this kernel has the netem qdisc (tried on a probe namespace's loopback)."""
    probe = f"rsnetem{os.getpid() % 100000}"
    if subprocess.run([ip, "netns", "add", probe], capture_output=True).returncode != 0:
        return False
    try:
        tc = shutil.which("tc") or "/usr/sbin/tc"
        return subprocess.run([ip, "netns", "exec", probe, tc, "qdisc", "add", "dev", "lo", "root", "netem", "delay",
                               "1ms"], capture_output=True).returncode == 0
    finally:
        subprocess.run([ip, "netns", "delete", probe], capture_output=True)


class Hosts:
    """Named hosts (network namespaces) on one switch, at <subnet>.1, .2, … in the order given; with `delay_ms`
    (host → one-way ms) each host's outgoing frames are held that long (± `jitter_ms`, the same for all)."""

    def __init__(self, names: list[str], *, subnet: str = "10.231.7", tag: str | None = None,
                 delay_ms: dict[str, float] | None = None, jitter_ms: float = 0.0, seed: int = 0):
        self.ip = check_available()
        self.tag = tag or f"rs{os.getpid() % 100000}"
        self.names = list(names)
        self.addr = {name: f"{subnet}.{i + 1}" for i, name in enumerate(names)}
        self.ns = {name: f"{self.tag}{name}" for name in names}
        self.delay_ms = {name: float((delay_ms or {}).get(name, 0.0)) for name in names}
        self.jitter_ms, self.seed = float(jitter_ms), seed
        self.netem = bool(delay_ms) and netem_available(self.ip)
        self.delayed_by = "" if not delay_ms else "netem" if self.netem else "user-space switch"
        self._made: list[str] = []
        self._switch: subprocess.Popen | None = None

    def _ip(self, *args: str) -> None:
        done = subprocess.run([self.ip, *args], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")

    def _add_ns(self, ns: str) -> None:
        subprocess.run([self.ip, "netns", "delete", ns], capture_output=True)  # a leftover of a killed run
        self._ip("netns", "add", ns)
        self._made.append(ns)
        self._ip("-n", ns, "link", "set", "lo", "up")

    def __enter__(self) -> Hosts:
        try:
            taps = bool(self.delayed_by) and not self.netem
            if not taps:
                self._add_ns(f"{self.tag}sw")
                self._ip("-n", f"{self.tag}sw", "link", "add", "br0", "type", "bridge")
                self._ip("-n", f"{self.tag}sw", "link", "set", "br0", "up")
            for i, name in enumerate(self.names):
                ns = self.ns[name]
                self._add_ns(ns)
                if taps:
                    self._ip("-n", ns, "tuntap", "add", "dev", "eth0", "mode", "tap")
                else:
                    sw = f"{self.tag}sw"
                    self._ip("-n", sw, "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
                    self._ip("-n", sw, "link", "set", f"p{i}", "master", "br0")
                    self._ip("-n", sw, "link", "set", f"p{i}", "up")
                self._ip("-n", ns, "addr", "add", f"{self.addr[name]}/24", "dev", "eth0")
                self._ip("-n", ns, "link", "set", "eth0", "up")
                if self.netem and self.delay_ms[name] > 0:
                    tc = shutil.which("tc") or "/usr/sbin/tc"
                    cmd = [tc, "qdisc", "add", "dev", "eth0", "root", "netem", "delay", f"{self.delay_ms[name]}ms",
                           *([f"{self.jitter_ms}ms"] if self.jitter_ms else [])]
                    done = subprocess.run(self.command(name, cmd), capture_output=True, text=True)
                    if done.returncode != 0:
                        raise RuntimeError(f"tc netem on {name}: {done.stderr.strip()}")
            if taps:
                spec = [[self.ns[n], self.delay_ms[n], self.jitter_ms] for n in self.names]
                self._switch = subprocess.Popen([sys.executable, "-m", "bench.harness.netns", json.dumps(spec),
                                                 str(self.seed)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                text=True, start_new_session=True)
                if self._switch.stdout.readline().strip() != "ready":
                    raise RuntimeError("the user-space switch did not start")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        for ns in self._made:  # processes started in a host (and their children) die before their namespace goes
            kill_pids(self.pids(ns))
        if self._switch is not None:
            kill_pids([self._switch.pid])
            self._switch.wait()
            self._switch = None
        for ns in reversed(self._made):  # deleting a namespace deletes its veth ends and taps
            subprocess.run([self.ip, "netns", "delete", ns], capture_output=True)
        self._made.clear()

    @property
    def switch_pid(self) -> int | None:
        """The user-space switch's process (None where the frames cross a bridge)."""
        return self._switch.pid if self._switch is not None else None

    def pids(self, ns: str) -> list[int]:
        done = subprocess.run([self.ip, "netns", "pids", ns], capture_output=True, text=True)
        return [int(x) for x in done.stdout.split()] if done.returncode == 0 else []

    def command(self, host: str, cmd: list[str]) -> list[str]:
        """`cmd` run on `host` (ip netns exec replaces itself with it: the pid is the command's)."""
        return [self.ip, "netns", "exec", self.ns[host], *cmd]

    def popen(self, host: str, cmd: list[str], **kw) -> subprocess.Popen:
        """`cmd` started on `host`, returned once it runs in the host's namespace (or has already ended): `ip netns
        exec` enters the namespace only after it starts, and until then neither `pids` nor leaving the hosts sees it."""
        proc = subprocess.Popen(self.command(host, cmd), **kw)
        ns = os.stat(f"/var/run/netns/{self.ns[host]}").st_ino
        deadline = time.monotonic() + ENTER_TIMEOUT_S
        while proc.poll() is None and not _in_netns(proc.pid, ns):
            if time.monotonic() > deadline:
                kill_pids([proc.pid])
                raise RuntimeError(f"{cmd[0]} did not enter {host}'s namespace within {ENTER_TIMEOUT_S:g} s")
            time.sleep(0.01)
        return proc

    def rtt_ms(self, src: str, dsts: list[str], probes: int = 4) -> dict[str, list[float]]:
        """Round trips from `src` to each of `dsts`, in ms: a TCP connect to a closed port, answered by a reset
        (one round trip; no listener needed). The first probe of each pair (it also resolves the address) is
        left out."""
        code = ("import socket,sys,time,json\nout={}\nfor a in sys.argv[2:]:\n xs=[]\n for i in range(int(sys.argv[1])"
                "+1):\n  s=socket.socket(); s.settimeout(5); t=time.perf_counter()\n  try: s.connect((a,9))\n  except"
                " OSError: pass\n  xs.append((time.perf_counter()-t)*1e3); s.close()\n out[a]=xs[1:]\nprint(json.dumps"
                "(out))")
        done = subprocess.run(self.command(src, [sys.executable, "-c", code, str(probes),
                                                 *(self.addr[d] for d in dsts)]), capture_output=True, text=True)
        got = json.loads(done.stdout or "{}")
        return {d: got.get(self.addr[d], []) for d in dsts}


ENTER_TIMEOUT_S = 60.0  # a process started on a host enters its namespace within this long (a busy machine)


def _in_netns(pid: int, ns_inode: int) -> bool:
    """Whether process `pid` runs in the network namespace whose inode is `ns_inode`."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino == ns_inode
    except OSError:  # gone, or not ours to see
        return False


def kill_pids(pids: list[int], grace_s: float = 3.0) -> None:
    """SIGTERM these processes, then SIGKILL those still there after `grace_s`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = []
        for pid in pids:
            try:
                os.kill(pid, sig)
                alive.append(pid)
            except ProcessLookupError:
                pass
        if not alive or sig == signal.SIGKILL:
            return
        end = time.monotonic() + grace_s
        while time.monotonic() < end and any(_alive(p) for p in alive):
            time.sleep(0.1)
        pids = [p for p in alive if _alive(p)]


def _alive(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)  # reaps a child of ours
        if done:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.is_file() and ") Z" in stat.read_text())


# ---------------------------------------------------------------- the user-space switch (one process)

TUNSETIFF, IFF_TAP, IFF_NO_PI, CLONE_NEWNET = 0x400454CA, 0x0002, 0x1000, 0x40000000


def _attach_tap(ns: str) -> int:
    """An fd on the tap `eth0` of namespace `ns` (entered for the open, then left)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    there = os.open(f"/var/run/netns/{ns}", os.O_RDONLY)
    try:
        if libc.setns(there, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {ns}")
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", b"eth0", IFF_TAP | IFF_NO_PI))
    finally:
        libc.setns(home, CLONE_NEWNET)
        os.close(there)
        os.close(home)
    return fd


def switch(spec: list[list], seed: int = 0) -> None:
    """Forward frames between the taps of `spec` ([namespace, delay ms, jitter ms] per port), each held for its
    sender's delay, learning which port has which MAC (unknown and broadcast: every other port); until stdin
    closes or SIGTERM."""
    rng = random.Random(seed)
    fds = [_attach_tap(ns) for ns, _, _ in spec]
    delay = {fd: (d / 1e3, j / 1e3) for fd, (_, d, j) in zip(fds, spec)}
    last = dict.fromkeys(fds, 0.0)  # a sender's frames leave in the order sent
    where: dict[bytes, int] = {}
    queue: list = []
    seq = 0
    sel = selectors.DefaultSelector()
    for fd in fds:
        sel.register(fd, selectors.EVENT_READ)
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("ready", flush=True)
    while True:
        now = time.monotonic()
        while queue and queue[0][0] <= now:
            _, _, dst, frame = heapq.heappop(queue)
            try:
                os.write(dst, frame)
            except OSError:
                pass  # a tap whose interface is down drops it, as a wire would
        for key, _ in sel.select(max(0.0, queue[0][0] - now) if queue else 1.0):
            src = key.fd
            if src == sys.stdin.fileno():
                if not os.read(src, 1024):
                    return
                continue
            for _ in range(64):
                try:
                    frame = os.read(src, 65536)
                except BlockingIOError:
                    break
                where[frame[6:12]] = src
                d, j = delay[src]
                due = last[src] = max(last[src], time.monotonic() + d + (rng.uniform(-j, j) if j else 0.0))
                port = where.get(frame[0:6])
                for dst in ([f for f in fds if f != src] if port is None else [] if port == src else [port]):
                    seq += 1
                    heapq.heappush(queue, (due, seq, dst, frame))


if __name__ == "__main__":
    switch(json.loads(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 0)
