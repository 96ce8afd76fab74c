"""swarm.dht.peer._start: p2pd's own start-up keeps its time however little of swarm.startup_timeout_s the bootstrap
retries have left, and a p2pd that was merely slow to start is not taken for one that refused its pubsub flags.

On a busy machine (CI, `pytest -n 4`) the last retry before the deadline gave p2pd max(left, 1.0) = 1 s; p2pd took
longer, hivemind raised "Daemon failed to start in 1.0 seconds", and that was read as a refusal of the pubsub flags:
the node restarted without gossip and then failed with the daemon error instead of "none of the initial peers
answered" (tests/integration/test_doctor.py, test_hivemind_transport.py). The DHT is replaced here by a stand-in
that records what it was given and behaves like hivemind's under load."""

from __future__ import annotations

import pytest

import swarm.dht.peer as peer
from swarm.config import SwarmConfig

DEAD = "/ip4/127.0.0.1/tcp/9/p2p/QmSBhXqZhkAD4odn9j88ZwbEy19mykMNw4CUrwtwt6dQ8V"


class SlowMachineDHT:
    """hivemind's DHT on a machine where p2pd needs 3 s to start and the initial peer never answers."""

    calls: list[dict] = []

    def __init__(self, **kw):
        SlowMachineDHT.calls.append(kw)
        if kw["startup_timeout"] < 3.0:
            raise RuntimeError(f"Daemon failed to start in {kw['startup_timeout']:.1f} seconds")
        raise RuntimeError("Failed to bootstrap: none of the initial peers answered")  # hivemind's own words differ


@pytest.fixture
def slow(monkeypatch):
    SlowMachineDHT.calls = []
    monkeypatch.setattr(peer, "QuietOrphanDHT", SlowMachineDHT)
    monkeypatch.setattr(peer.time, "sleep", lambda s: None)  # the retries' pauses: the deadline still runs
    return SlowMachineDHT.calls


def test_p2pd_gets_its_start_up_time_on_every_retry(slow):
    cfg = SwarmConfig(enabled=True, initial_peers=[DEAD], startup_timeout_s=2.0, gossip=True)
    with pytest.raises(peer.BootstrapUnreachable):
        peer._start(cfg, "/nonexistent.key", validator=None, fresh_identity=True)
    assert slow and all(c["startup_timeout"] >= peer.P2PD_START_S for c in slow), [c["startup_timeout"] for c in slow]
    assert all(c["pubsub"] for c in slow)  # never restarted without gossip


def test_a_slow_p2pd_is_not_a_refusal_of_the_pubsub_flags(slow, monkeypatch):
    monkeypatch.setattr(peer, "P2PD_START_S", 1.0, raising=False)  # as before: a squeezed start fails on this machine
    cfg = SwarmConfig(enabled=True, initial_peers=[DEAD], startup_timeout_s=0.5, gossip=True)
    with pytest.raises(RuntimeError, match="failed to start in"):
        peer._start(cfg, "/nonexistent.key", validator=None, fresh_identity=True)
    assert [c["pubsub"] for c in slow] == [True]  # the daemon's error is said, not a gossip-less restart
