"""A DHT-only bootstrap peer (`swarm bootstrap`) and the error a node raises when it cannot join.

A bootstrap peer stores nothing of its own; it is the first address newcomers dial, and then an
ordinary DHT member that holds replicas of announcements. It runs the same
``RSASignatureValidator`` as every node, so it refuses announcements whose signature does not
match their ``[owner:…]`` subkey instead of storing and relaying them.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Sequence

from hivemind import DHT
from hivemind.dht.crypto import RSASignatureValidator


class BootstrapUnreachable(RuntimeError):
    """None of the initial peers answered within the startup timeout (message: one line)."""

    @classmethod
    def for_peers(cls, peers: Sequence[str], timeout_s: float) -> BootstrapUnreachable:
        return cls(f"none of the initial peers answered within {timeout_s:g} s: {', '.join(peers)}; "
                   "check the addresses (copy one line printed by `swarm bootstrap`) and that the peer is running, "
                   "or start one with `swarm bootstrap`")


def start_bootstrap(*, host_maddrs: Sequence[str] = ("/ip4/127.0.0.1/tcp/0",), announce_maddrs: Sequence[str] = (),
                    identity_path: str | None = None, startup_timeout_s: float = 60.0, swarm_id: str = "rlswarm",
                    initial_peers: Sequence[str] = ()) -> tuple[DHT, list[str]]:
    """Start a DHT-only peer in-process; returns (dht, its visible multiaddrs with /p2p/<id>).

    ``swarm_id`` only labels the peer in logs: DHT keys carry the swarm id, so one bootstrap
    peer can serve several swarms.
    """
    from swarm.config import SwarmConfig
    from swarm.hivemind_transport import start_dht
    from swarm.identity import ephemeral_identity, load_or_create_identity

    cfg = SwarmConfig(enabled=True, swarm_id=swarm_id, initial_peers=list(initial_peers),
                      host_maddrs=list(host_maddrs), announce_maddrs=list(announce_maddrs),
                      identity_path=identity_path, startup_timeout_s=startup_timeout_s)
    if identity_path is not None:
        key, _ = load_or_create_identity(identity_path)
        path, tmp = identity_path, None
    else:
        key, tmp = ephemeral_identity()
        path = str(tmp)
    try:
        dht = start_dht(cfg=cfg, identity_path=path, validator=RSASignatureValidator(key),
                        fresh_identity=tmp is not None)
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
            tmp.parent.rmdir()
    return dht, [str(a) for a in dht.get_visible_maddrs()]


def run_bootstrap(*, host_maddrs: list[str], announce_maddrs: list[str], identity_path: str | None,
                  startup_timeout_s: float, swarm_id: str, print_fn: Callable[..., None] = print) -> None:
    """Run a bootstrap peer until SIGINT/SIGTERM, printing its multiaddrs one per line (stdout, flushed)."""
    dht, maddrs = start_bootstrap(host_maddrs=host_maddrs, announce_maddrs=announce_maddrs,
                                  identity_path=identity_path, startup_timeout_s=startup_timeout_s,
                                  swarm_id=swarm_id)
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        print_fn(f"bootstrap peer {dht.peer_id.to_base58()} ready; pass one of these as --initial-peers:", flush=True)
        for addr in maddrs:
            print_fn(addr, flush=True)
        while not stop.wait(1.0):
            if not dht.is_alive():
                raise RuntimeError("the bootstrap DHT process died; see the log above")
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        dht.shutdown()
