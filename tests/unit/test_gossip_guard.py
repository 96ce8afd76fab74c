"""The gossip guard (swarm.exchange.gossip_guard): a signer over its allowance is banned and disconnected, at most
once per DISCONNECT_EVERY_S while banned; bans expire; the books stay bounded; 0 turns it off. And the hook in
GossipAnnouncements: a banned signer's messages never reach the Inbox and are counted as the drop `banned`."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from swarm.config import SwarmConfig
from swarm.exchange.gossip import GossipAnnouncements
from swarm.exchange.gossip_guard import BURST, GossipGuard
from swarm.exchange.poller import PollGate


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _guard(ban_s: float = 300.0, **kw):
    clock, cut = Clock(), []

    async def disconnect(peer: str) -> None:
        cut.append(peer)

    def spawn(coro):  # run at once: no loop needed
        try:
            coro.send(None)
        except StopIteration:
            pass

    return GossipGuard(disconnect, spawn, ban_s, clock=clock, **kw), clock, cut


def test_an_honest_rate_is_never_banned_and_a_flood_is_banned_and_cut_at_a_bounded_rate():
    guard, clock, cut = _guard()
    for _ in range(600):  # one message every 1.5 s for 15 minutes, with bursts of 10 on top every minute
        clock.t += 1.5
        assert guard.admit("honest")
    for _ in range(10):
        assert guard.admit("honest")
    assert guard.banned == 0 and cut == []
    admitted = sum(guard.admit("spammer") for _ in range(BURST + 5))
    assert admitted == BURST and guard.banned == 1 and cut == ["spammer"] and guard.is_banned("spammer")
    for _ in range(40):  # 4 messages a second for 10 s while banned: one disconnect per 2 s
        clock.t += 0.25
        assert not guard.admit("spammer")
    assert guard.disconnects == 1 + 5 and len(cut) == 6 and guard.banned == 1
    assert guard.admit("honest")  # others are not affected
    clock.t += 300.0  # the ban expires: a fresh allowance
    assert guard.admit("spammer") and not guard.is_banned("spammer") and guard.banned_peers() == []


def test_zero_turns_it_off_and_the_books_are_bounded_whatever_the_identities():
    off, _, cut = _guard(0.0)
    assert all(off.admit("spammer") for _ in range(1000)) and off.banned == 0 and cut == []
    guard, clock, cut = _guard(max_banned=4, max_tracked=16)
    for i in range(200):  # fresh identities: each under its allowance, never banned, books bounded
        assert guard.admit(f"fresh{i}")
        assert len(guard._buckets) <= 16
    for i in range(10):  # ten floods: at most four bans held, the first ones out first
        while guard.admit(f"flood{i}"):
            pass
        clock.t += 1.0
    assert guard.banned == 10 and len(guard._bans) == 4 and guard.banned_peers() == [f"flood{i}" for i in range(6, 10)]


def test_a_banned_signers_messages_are_dropped_before_the_inbox():
    offered, dropped = [], []
    inbox = SimpleNamespace(offer=lambda value, sender, now: offered.append(sender) or False,
                            drop=lambda reason: dropped.append(reason), limits=None)
    spawned = []
    transport = SimpleNamespace(peer_id="me", inbox=inbox, cfg=SwarmConfig(gossip=True),
                                spawn=lambda coro: spawned.append(coro), _fetch_chosen=lambda: None)
    gossip = GossipAnnouncements(transport, SimpleNamespace(disconnect=None), "topic")
    msgs = [SimpleNamespace(sender="spammer", data=b"x" * 10) for _ in range(BURST + 5)]
    msgs.append(SimpleNamespace(sender="me", data=b"ours"))

    class Sub:
        async def __aenter__(self):
            return self

        async def __aexit__(self, *exc):
            return None

        def __aiter__(self):
            async def gen():
                for m in msgs:
                    yield m
            return gen()

    import swarm.exchange.gossip as g
    valid, g._valid = g._valid, lambda *a: False
    try:
        asyncio.run(gossip._receive(Sub()))
    finally:
        g._valid = valid
    assert len(offered) == BURST and dropped == ["banned"] * 5
    assert gossip.received == BURST + 5 and gossip.received_bytes == 10 * (BURST + 5)
    assert (gossip.banned, gossip.disconnects) == (1, 1) and len(spawned) == 1
    spawned[0].close()


def test_our_own_gossip_is_paced_to_half_the_allowance_and_the_newest_waiting_one_goes_out():
    """A node whose rounds are faster than the pace: the first PUBLISH_BURST announcements go at once, later ones
    wait for the next token, a newer one replacing the one waiting (counted `publish_paced`); so over any stretch
    it gossips at most PUBLISH_BURST + PUBLISH_RATE_PER_S × seconds, half of what every receiver's guard allows."""
    from swarm.exchange.gossip_guard import PUBLISH_BURST, PUBLISH_RATE_PER_S, RATE_PER_S

    assert PUBLISH_BURST <= BURST / 2 and PUBLISH_RATE_PER_S <= RATE_PER_S / 2
    sent: list[bytes] = []

    async def run() -> GossipAnnouncements:
        loop = asyncio.get_running_loop()

        async def publish(topic: str, data: bytes) -> None:
            sent.append(data)

        transport = SimpleNamespace(peer_id="me", cfg=SwarmConfig(gossip=True),
                                    spawn=lambda coro: loop.create_task(coro))
        gossip = GossipAnnouncements(transport, SimpleNamespace(disconnect=None, publish=publish), "topic")
        for i in range(PUBLISH_BURST + 5):  # all within a few milliseconds
            await gossip.publish(b"%d" % i)
        assert len(sent) == PUBLISH_BURST  # the rest wait: only the newest of them will go
        await asyncio.sleep(1.2 / PUBLISH_RATE_PER_S)
        return gossip

    gossip = asyncio.run(run())
    assert sent == [b"%d" % i for i in range(PUBLISH_BURST)] + [b"%d" % (PUBLISH_BURST + 4)]
    assert (gossip.published, gossip.publish_paced) == (PUBLISH_BURST + 1, 4)
    # a receiver's guard with the default allowance never bans this pace
    guard, clock, _ = _guard()
    admitted = []
    for k in range(600):  # ten minutes of one announcement every 0.1 s, paced as above
        clock.t += 0.1
        if k < PUBLISH_BURST or k % round(1 / (0.1 * PUBLISH_RATE_PER_S)) == 0:
            admitted.append(guard.admit("fast"))
    assert all(admitted) and guard.banned == 0


def test_a_gossiped_announcement_is_chosen_from_after_a_random_spread_in_a_large_swarm_only():
    """`gossip_fetch_spread_s`: with gossip delivering from more than 16 peers, the fan-in choice after a gossiped
    announcement waits a random 0 to spread × (peers / 16 − 1) s, one timer for all that arrive meanwhile; with
    16 peers or fewer (a publisher admits that many strangers' streams at once), or a spread of 0, at once."""
    chosen: list[float] = []

    async def run(spread: float, peers: int) -> float:
        loop = asyncio.get_running_loop()
        gate = PollGate(every=60, quiet_polls=60, interval_s=0.5)
        for i in range(peers):
            gate.saw_gossip(f"p{i}", time.monotonic())
        transport = SimpleNamespace(peer_id="me", cfg=SwarmConfig(gossip=True, gossip_fetch_spread_s=spread),
                                    spawn=lambda coro: loop.create_task(coro), poll_gate=gate,
                                    _fetch_chosen=lambda: chosen.append(loop.time()))
        gossip = GossipAnnouncements(transport, SimpleNamespace(disconnect=None), "topic")
        t0 = loop.time()
        for _ in range(5):
            gossip._choose_soon()
        await asyncio.sleep(spread * max(0.0, peers / 16 - 1) + 0.2)
        return t0

    for spread, peers in ((0.0, 64), (0.5, 3), (0.5, 16)):  # at once
        chosen.clear()
        t0 = asyncio.run(run(spread, peers))
        assert len(chosen) == 5 and all(t - t0 < 0.05 for t in chosen), (spread, peers)
    chosen.clear()
    t0 = asyncio.run(run(0.25, 48))  # 48 peers: up to 0.25 × (3 − 1) = 0.5 s, one choice for the five
    assert len(chosen) == 1 and 0.0 <= chosen[0] - t0 <= 0.6
