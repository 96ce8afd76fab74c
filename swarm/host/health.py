"""Is this node's swarm machinery still running? The process table, and the DHT child and its p2pd.

A hivemind transport lives in two more processes (docs/ARCHITECTURE.md §3): the DHT child that
`hivemind.DHT` forks, and the p2pd daemon that child starts. When either dies the node's rounds
go on with no peers and every gather waits its full timeout, so the node checks
`transport_problem(transport)` before each round and stops with one line when it says something.

The process table is read from /proc (Linux); elsewhere the functions see no processes and the
checks report nothing. Standard library only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


class TransportDied(RuntimeError):
    """The swarm transport's DHT process or p2p daemon is gone (message: one line)."""


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    name: str  # /proc/<pid>/comm: the executable's name, at most 15 characters
    state: str  # R, S, D, Z (zombie: exited, not reaped), …
    start: int  # start time in clock ticks since boot: (pid, start) names a process uniquely


def process_table() -> dict[int, Proc]:
    """Every process visible in /proc (empty where there is no /proc)."""
    out: dict[int, Proc] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if entry.isdigit():
            proc = read_proc(int(entry))
            if proc is not None:
                out[proc.pid] = proc
    return out


def read_proc(pid: int) -> Proc | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except OSError:
        return None
    name = raw[raw.index("(") + 1 : raw.rindex(")")]
    fields = raw[raw.rindex(")") + 2 :].split()  # state ppid pgrp session … starttime (22nd field)
    return Proc(pid, int(fields[1]), name, fields[0], int(fields[19]))


def alive(proc: Proc) -> bool:
    """The same process (pid and start time) still exists and has not exited."""
    now = read_proc(proc.pid)
    return now is not None and now.start == proc.start and now.state not in ("Z", "X")


def descendants(pid: int, table: dict[int, Proc] | None = None) -> list[Proc]:
    """Children, grandchildren, … of `pid`, parents before their children."""
    table = process_table() if table is None else table
    kids: dict[int, list[Proc]] = {}
    for p in table.values():
        kids.setdefault(p.ppid, []).append(p)
    out, todo = [], [pid]
    while todo:
        for child in kids.get(todo.pop(0), []):
            out.append(child)
            todo.append(child.pid)
    return out


class TransportWatch:
    """Remembers the transport's DHT process and its p2pd when first asked, then says when one is gone."""

    def __init__(self, transport) -> None:
        try:  # hivemind.DHT, a multiprocessing child; transports without processes have none
            self.dht = transport.dht if transport is not None else None
        except Exception:  # noqa: BLE001 — not started, or no such attribute (the in-memory twin)
            self.dht = None
        self.p2pd: Proc | None = None
        if self.dht is not None and self.dht.pid is not None:
            self.p2pd = next((p for p in descendants(self.dht.pid) if p.name == "p2pd"), None)

    def problem(self) -> str | None:
        """One line saying what died, or None while everything runs."""
        if self.dht is None or self.dht.pid is None:
            return None
        if not self.dht.is_alive():
            return (f"the swarm's DHT process (pid {self.dht.pid}) died (exit code {self.dht.exitcode}); "
                    "this node cannot exchange with peers any more")
        if self.p2pd is not None and not alive(self.p2pd):
            return (f"the swarm's p2p daemon p2pd (pid {self.p2pd.pid}) died; "
                    "this node cannot exchange with peers any more")
        return None
