"""Hosts for network tests: Linux network namespaces on one virtual switch, made and removed by the test.

    with Hosts(["boot", "a", "b"], subnet="10.231.7") as hosts:   # 10.231.7.1, .2, .3
        proc = hosts.popen("a", [sys.executable, "-m", "ops.cli", ...], stdout=...)

A namespace `<tag>sw` holds a bridge; each host is a namespace with its own loopback and one veth
(`eth0`) plugged into that bridge, so the hosts reach each other at their addresses and nothing
else: no route leaves the namespaces, and nothing is added to the machine's own namespace (each
veth pair is created inside them). Needs root and iproute2 (`ip netns`); `skip_unless_available()`
skips a test with the reason otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def ip_binary() -> str | None:
    return shutil.which("ip") or next((p for p in ("/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip") if Path(p).is_file()),
                                      None)


def skip_unless_available() -> str:
    """The `ip` binary, or pytest.skip with why network namespaces cannot be made here."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (ip netns); run as root to test across hosts")
    ip = ip_binary()
    if ip is None:
        pytest.skip("iproute2's `ip` is not installed: cannot make network namespaces")
    probe = f"rsprobe{os.getpid() % 100000}"
    made = subprocess.run([ip, "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"`ip netns add` fails here: {made.stderr.strip()[:200]}")
    subprocess.run([ip, "netns", "delete", probe], capture_output=True)
    return ip


class Hosts:
    """Named hosts (network namespaces) on one switch, at <subnet>.1, .2, … in the order given."""

    def __init__(self, names: list[str], *, subnet: str = "10.231.7", tag: str | None = None):
        self.ip = skip_unless_available()
        self.tag = tag or f"rs{os.getpid() % 100000}"
        self.names = list(names)
        self.addr = {name: f"{subnet}.{i + 1}" for i, name in enumerate(names)}
        self.ns = {name: f"{self.tag}{name}" for name in names}
        self._made: list[str] = []

    def _ip(self, *args: str) -> None:
        done = subprocess.run([self.ip, *args], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")

    def __enter__(self) -> Hosts:
        switch = f"{self.tag}sw"
        try:
            for ns in [switch, *self.ns.values()]:
                subprocess.run([self.ip, "netns", "delete", ns], capture_output=True)  # a leftover of a killed run
                self._ip("netns", "add", ns)
                self._made.append(ns)
                self._ip("-n", ns, "link", "set", "lo", "up")
            self._ip("-n", switch, "link", "add", "br0", "type", "bridge")
            self._ip("-n", switch, "link", "set", "br0", "up")
            for i, name in enumerate(self.names):
                port = f"p{i}"
                self._ip("-n", switch, "link", "add", port, "type", "veth", "peer", "name", "eth0",
                         "netns", self.ns[name])
                self._ip("-n", switch, "link", "set", port, "master", "br0")
                self._ip("-n", switch, "link", "set", port, "up")
                self._ip("-n", self.ns[name], "addr", "add", f"{self.addr[name]}/24", "dev", "eth0")
                self._ip("-n", self.ns[name], "link", "set", "eth0", "up")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        for ns in reversed(self._made):  # deleting a namespace deletes its veth ends
            subprocess.run([self.ip, "netns", "delete", ns], capture_output=True)
        self._made.clear()

    def command(self, host: str, cmd: list[str]) -> list[str]:
        """`cmd` run on `host` (ip netns exec replaces itself with it: the pid is the command's)."""
        return [self.ip, "netns", "exec", self.ns[host], *cmd]

    def popen(self, host: str, cmd: list[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(self.command(host, cmd), **kw)
