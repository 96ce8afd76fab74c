"""A hostile peer must not turn a node into its dialler, nor its DHT reads into a storm, nor hide its peers behind
unsigned DHT entries (docs/PROTOCOL.md §5, §6.1, swarm.net.dial, swarm.dht.peer), over real hivemind peers on 127.0.0.1.
Each test failed before the bound it checks:

  dial amplification  identities naming an address of their choosing had every receiver dial it on every fetch
                      (and push); now a failed address waits (10 s, doubling) for every peer that names it, and
                      new addresses are dialled at a bounded rate, only in the receiver's own network scopes
  wake storms         every pushed announcement woke the poller for a full DHT read; now a push runs only the
                      fan-in choice
  unsigned flooding   1,000 unsigned entries under a key hid the one signed entry (sampled before they were
                      dropped) and slowed the poll plan's reads of it; now they are refused on store and dropped
                      before a read samples, and a newcomer finds its peer
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest
from hivemind import DHT

from bench.harness.attacks import Ghosts, announcement, flood_unsigned
from protocols.announce import encode_announcement
from protocols.codec import encode_bundle
from protocols.keys import window_of
from swarm.dht.bootstrap import start_bootstrap
from swarm.exchange.hivemind import HivemindTransport
from swarm.net import wire
from swarm.net.wire import notify
from tests.adversarial.test_exhaustion import _meet, _wait, record
from tests.integration.conftest import peer_config

pytestmark = pytest.mark.integration


class CountingListener:
    """A TCP port on 127.0.0.1 that accepts and counts connections (and closes them): the target a hostile peer
    names as its address."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = False
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop = True
        self.sock.close()


@pytest.fixture
def boot():
    b, maddrs = start_bootstrap(startup_timeout_s=120)
    made: list = []
    try:
        yield maddrs, made
    finally:
        for t in made:
            t.shutdown()
        b.shutdown()


def _peer(boot, **kw) -> HivemindTransport:
    maddrs, made = boot
    t = HivemindTransport(cfg=peer_config(maddrs[:1], **{"poll_interval_s": 0.2, "startup_timeout_s": 120, **kw}))
    made.append(t)
    return t


def test_an_address_ghosts_name_is_not_dialled_for_each_of_them(boot):
    """32 throwaway identities announce bundles nobody serves, each naming the same TCP port as its address."""
    maddrs, made = boot
    victim = _peer(boot)
    trap = CountingListener()
    ghosts = Ghosts(32, maddrs[0], addrs=f"/ip4/127.0.0.1/tcp/{trap.port}")
    made.append(ghosts)
    try:
        victim.publish([])
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline:  # a new window's announcements every 10 s
            assert ghosts.announce("rlswarm", victim.cfg.shards) > 0
            time.sleep(min(10.0, max(0.0, deadline - time.monotonic())))
            victim.take()
        # before: every fetch of a ghost's bundle dialled the port first (one connection per fetch); now the
        # port, once failed, waits 10 s, then 20 s, for every peer that names it
        assert trap.accepted <= 6, (trap.accepted, victim.dials.stats)  # p2pd may open two connections a dial
        assert victim.dials.stats["dialled"] <= 3, victim.dials.stats  # at 0 s, ≥ 10 s, ≥ 30 s
        assert victim.dials.stats["waiting"] + victim.dials.stats["joined"] > 0, victim.dials.stats
    finally:
        trap.close()


def test_pushed_announcements_do_not_wake_dht_reads(boot):
    victim, pusher = _peer(boot, poll_interval_s=1.0), _peer(boot)
    _meet(victim, pusher)
    reads = []
    real = victim._poll_once

    async def counted(tick):
        reads.append(time.monotonic())
        return await real(tick)
    victim._poll_once = counted

    async def storm(count: int) -> None:  # a count, not a duration: a busy machine sends as many, more slowly
        for k in range(count):
            data = encode_bundle([record(pusher.peer_id, 5000 + k)])
            ann = announcement(pusher, data, 1)
            pusher._serve(ann, data)  # valid and served: each one is a new fetch candidate
            await notify(pusher.open_stream, victim.peer_id, wire.NOTIFY_NAME, encode_announcement(ann), 5)
            await asyncio.sleep(0.03)
    start = time.monotonic()
    asyncio.run_coroutine_threadsafe(storm(150), pusher._loop).result(300)
    elapsed = time.monotonic() - start
    n = sum(t >= start for t in reads)
    # before: each new pushed announcement woke the poller for a DHT read (one per push, 150 reads); now the poller
    # reads on its own interval (1 s) whatever arrives: at most one read a second of the storm, and a few more
    assert n <= elapsed / victim.cfg.poll_interval_s + 3, (n, elapsed)


def test_a_newcomer_finds_its_peer_under_a_thousand_unsigned_entries_per_key(boot):
    maddrs, made = boot
    quiet = {"notify_peers": 0, "shards": 1}  # no pushes: the DHT is the only way to be found
    honest = _peer(boot, **quiet)
    flooder = DHT(initial_peers=maddrs[:1], start=True, startup_timeout=120)  # hivemind's own, no validator of ours
    made.append(flooder)
    now_w = window_of(time.time(), 10)
    flood_unsigned(flooder, "rlswarm", windows=list(range(now_w - 1, now_w + 10)), shards=1, per_key=1000)
    stop = threading.Event()

    def publish_forever():
        k = 0
        while not stop.is_set():
            honest.publish([record(honest.peer_id, 9000 + k)])
            k += 1
            stop.wait(2.0)
    threading.Thread(target=publish_forever, daemon=True).start()
    try:
        newcomer = _peer(boot, **quiet)
        started = time.monotonic()
        found = _wait(lambda: honest.peer_id in newcomer.inbox.known_peers(), 60)
        # before: the signed entry was one of 1,001 sampled 32 at a time, and the key was then read every ~391 s
        assert found, f"the newcomer did not find its peer within 60 s (waited {time.monotonic() - started:.0f} s)"
    finally:
        stop.set()
