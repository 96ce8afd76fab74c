"""Shared swarms of real hivemind peers on 127.0.0.1 (one bootstrap peer + N transports).

    with transport_swarm(3, poll_interval_s=0.2) as (maddrs, peers): ...

`bootstrap` starts a `swarm bootstrap` process for tests that run `swarm node` processes: it yields
(its multiaddrs, a list of children) and stops every child in the list at the end.

`node_dht_and_peers(2, dht_max_held_mib=1)` starts a node's DHT peer as a node starts it
(swarm.dht.peer.start_swarm_dht) and N unmodified hivemind DHT peers joined to it; yields (node's DHT, peers).

`swarm3` is the module-scoped fixture most integration tests use: a test module sets
`SWARM3_CONFIG = {...}` (SwarmConfig fields) to tune its peers. Everything started is shut down
on exit, also when a test fails, so no p2pd outlives the test session.
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from swarm.config import SwarmConfig
from swarm.dht.bootstrap import start_bootstrap
from swarm.dht.peer import start_swarm_dht
from swarm.exchange.hivemind import HivemindTransport
from swarm.host.local import start_bootstrap as start_bootstrap_process
from swarm.host.local import stop_all


def peer_config(initial_peers: list[str], **overrides) -> SwarmConfig:
    """A SwarmConfig for a test peer of the local swarm (generous start-up timeout for a busy machine). Gossip is
    off unless a test asks for it: these peers test the DHT path, every peer's fallback; the gossip tests (and the
    nodes `swarm local` starts, which keep the default) run gossip."""
    return SwarmConfig(**{"enabled": True, "initial_peers": initial_peers, "startup_timeout_s": 120,
                          "dht_timeout_s": 5, "gossip": False, **overrides})


@contextmanager
def transport_swarm(n: int, **overrides):
    """A bootstrap peer and `n` HivemindTransports joined to it; yields (bootstrap maddrs, transports)."""
    boot, maddrs = start_bootstrap(startup_timeout_s=120)
    peers: list[HivemindTransport] = []
    try:
        for _ in range(n):
            peers.append(HivemindTransport(cfg=peer_config(maddrs[:1], **overrides)))
        yield maddrs, peers
    finally:
        for p in peers:
            p.shutdown()
        boot.shutdown()


@contextmanager
def node_dht_and_peers(n: int, **swarm):
    """A node's DHT peer (start_swarm_dht, SwarmConfig fields `swarm`) and `n` plain hivemind DHT peers joined to it
    on 127.0.0.1; yields (the node's DHT, the peers) and shuts all of them down."""
    from hivemind import DHT

    dht, _, _ = start_swarm_dht(SwarmConfig(enabled=True, initial_peers=[], startup_timeout_s=120, **swarm))
    peers = []
    try:
        maddrs = [str(m) for m in dht.get_visible_maddrs()]
        for _ in range(n):
            peers.append(DHT(start=True, initial_peers=maddrs, host_maddrs=["/ip4/127.0.0.1/tcp/0"],
                             startup_timeout=120))
        yield dht, peers
    finally:
        for p in peers:
            p.shutdown()
        dht.shutdown()


@pytest.fixture(scope="module")
def swarm3(request):
    with transport_swarm(3, **getattr(request.module, "SWARM3_CONFIG", {})) as swarm:
        yield swarm


@pytest.fixture
def bootstrap(tmp_path):
    boot, maddrs = start_bootstrap_process(tmp_path / "bootstrap.log")
    children = [boot]
    yield maddrs, children
    stop_all(children, grace_s=10)
