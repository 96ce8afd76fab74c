"""A CLI process's lifetime: how it starts (checked output dir, free ports, a lock) and how it stops.

  signals      SIGTERM (docker, systemd, `kill`) stops a command like Ctrl-C does: `Terminated`
               is raised in the main thread, so every `finally` runs and the node shuts its
               transport down (DHT child, p2pd) before exiting with 128 + 15; a second signal
               during that shutdown is ignored rather than cutting it short
  --out        created if missing; a path under a regular file or one we cannot write to is one
               line naming it; `lock_out_dir` holds a POSIX lock on OUT/.lock for the whole run,
               so a second node on the same directory exits 2 instead of interleaving metrics
               (POSIX locks belong to one process: forked children do not keep it after we die)
  ports        every fixed port the command will listen on is tried first, so a port in use is
               one line naming the port and what wanted it, not a traceback from p2pd

Everything here raises `UsageError` for the user's mistakes (shown as one line, exit 2).
Standard library only.
"""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import socket
from pathlib import Path

EXIT_TERMINATED = 128 + signal.SIGTERM


class UsageError(RuntimeError):
    """Something the user asked for cannot work as given (message: one line)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: unwind like Ctrl-C (KeyboardInterrupt), exit with 128 + SIGTERM."""


def install_signal_handlers() -> None:
    """SIGINT raises KeyboardInterrupt, SIGTERM raises Terminated; once one has, later ones are ignored."""

    owner = os.getpid()

    def stop(signum, _frame):
        if os.getpid() != owner:  # a forked child (hivemind's DHT process): the default action
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)  # let the shutdown that is starting now finish
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    # A shell that starts us with `&` leaves SIGINT ignored; Ctrl-C and `swarm local` must still stop us.
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)


def prepare_out_dir(out: Path, flag: str = "--out") -> Path:
    """Create `out` (and parents) or raise UsageError naming it; then check we can write there."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UsageError(f"{flag} {out}: exists and is not a directory") from None
    except OSError as exc:
        raise UsageError(f"{flag} {out}: cannot create it ({exc.strerror or exc})") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {out}: not writable by this user")
    return out


def lock_out_dir(out: Path, flag: str = "--out") -> int:
    """Hold an exclusive POSIX lock on OUT/.lock until this process exits; returns its descriptor.

    UsageError when another process holds it (the message names its pid) or the file cannot be
    written. The descriptor must stay open: closing any descriptor of the file drops the lock.
    """
    path = out / ".lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise UsageError(f"{flag} {out}: cannot write {path.name} ({exc.strerror or exc})") from None
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        if exc.errno in (errno.EACCES, errno.EAGAIN):
            raise UsageError(f"{flag} {out} is in use by another process (pid {owner}); "
                             "give every node its own directory") from None
        raise UsageError(f"{flag} {out}: cannot lock {path.name} ({exc.strerror or exc})") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def maddr_ports(maddrs: list[str]) -> list[tuple[str, str, int]]:
    """(protocol, host, port) of every multiaddr with a fixed port: /ip4|ip6/HOST/tcp|udp/PORT…"""
    out = []
    for addr in maddrs:
        parts = addr.strip("/").split("/")
        if len(parts) >= 4 and parts[0] in ("ip4", "ip6") and parts[2] in ("tcp", "udp") and parts[3].isdigit():
            if int(parts[3]) != 0:
                out.append((parts[2], parts[1], int(parts[3])))
    return out


def check_port_free(proto: str, host: str, port: int, what: str) -> None:
    """UsageError naming `what` when something already listens on (host, port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
    with socket.socket(family, kind) as s:
        if kind == socket.SOCK_STREAM:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do: TIME_WAIT is not "in use"
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UsageError(f"{what}: {proto} port {port} on {host} is already in use") from None
            if exc.errno in (errno.EADDRNOTAVAIL, errno.EACCES):
                raise UsageError(f"{what}: cannot listen on {host}:{port} ({exc.strerror})") from None
            raise


def check_ports(ports: list[tuple[str, str, int, str]]) -> None:
    for proto, host, port, what in ports:
        check_port_free(proto, host, port, what)
