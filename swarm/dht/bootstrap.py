"""A DHT-only bootstrap peer (`swarm bootstrap`).

A bootstrap peer stores nothing of its own; it is the first address newcomers dial, and then an
ordinary DHT member that holds replicas of announcements. It runs the same
``RSASignatureValidator`` as every node, so it refuses announcements whose signature does not
match their ``[owner:…]`` subkey instead of storing and relaying them. With ``gossip`` its p2pd also
runs pubsub and it subscribes to the swarm's announcement topic, so it relays gossiped announcements
(swarm.dht.relay); ``dht.gossip_relay`` is then that subscription, closed by ``dht.shutdown()``.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Sequence

from hivemind import DHT

from swarm.config import SwarmConfig
from swarm.dht.peer import start_swarm_dht
from swarm.dht.relay import GossipRelay


def start_bootstrap(*, host_maddrs: Sequence[str] = ("/ip4/127.0.0.1/tcp/0",), announce_maddrs: Sequence[str] = (),
                    identity_path: str | None = None, startup_timeout_s: float = 60.0, swarm_id: str = "rlswarm",
                    initial_peers: Sequence[str] = (), gossip: bool = False) -> tuple[DHT, list[str]]:
    """Start a DHT-only peer in-process; returns (dht, its visible multiaddrs with /p2p/<id>).

    ``swarm_id`` only labels the peer in logs: DHT keys carry the swarm id, so one bootstrap
    peer can serve several swarms; with ``gossip`` it is also the topic of the announcements it relays
    (swarm.dht.relay: it relays, judging no publisher).
    """
    cfg = SwarmConfig(enabled=True, swarm_id=swarm_id, initial_peers=list(initial_peers),
                      host_maddrs=list(host_maddrs), announce_maddrs=list(announce_maddrs),
                      identity_path=identity_path, startup_timeout_s=startup_timeout_s, gossip=gossip)
    dht, _, _ = start_swarm_dht(cfg)
    if gossip:
        try:
            relay = GossipRelay(dht, swarm_id)
        except BaseException:
            dht.shutdown()
            raise
        stop_dht = dht.shutdown

        def shutdown() -> None:
            relay.close()
            stop_dht()

        dht.gossip_relay, dht.shutdown = relay, shutdown
    return dht, [str(a) for a in dht.get_visible_maddrs()]


def run_bootstrap(*, host_maddrs: list[str], announce_maddrs: list[str], identity_path: str | None,
                  startup_timeout_s: float, swarm_id: str, print_fn: Callable[..., None] = print,
                  gossip: bool = False) -> None:
    """Run a bootstrap peer until SIGINT/SIGTERM, printing its multiaddrs one per line (stdout, flushed)."""
    dht, maddrs = start_bootstrap(host_maddrs=host_maddrs, announce_maddrs=announce_maddrs,
                                  identity_path=identity_path, startup_timeout_s=startup_timeout_s,
                                  swarm_id=swarm_id, gossip=gossip)
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        relays = (f" (relaying gossip on {dht.gossip_relay.topic} and {len(dht.gossip_relay.topics) - 1} announcement "
                  f"shard topics)") if gossip else ""
        print_fn(f"bootstrap peer {dht.peer_id.to_base58()} ready{relays}; pass one of these as --initial-peers:",
                 flush=True)
        for addr in maddrs:
            print_fn(addr, flush=True)
        while not stop.wait(1.0):
            if not dht.is_alive():
                raise RuntimeError("the bootstrap DHT process died; see the log above")
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        dht.shutdown()
