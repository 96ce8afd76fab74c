"""The gossip guard (swarm.exchange.gossip_guard), which a replayer cannot turn against the peer it judges.

A signed message proves only what its signer signed (the announcement's bytes, its `created_at` among them), never
when or how often it arrives: so a replay of an honest peer's messages — in any order, all at once, to a receiver
that never saw them, after the receiver's seen-cache forgot them, or long after — is a duplicate or stale and never
bans its author, while a signer that itself signs more than its allowance is banned and its gossip dropped unread
(nothing more: the guard has no way to disconnect anyone). Bans expire; the books stay bounded in entries and bytes;
0 turns bans off. And the hook in GossipAnnouncements: the guard's verdicts are drops by reason before the Inbox."""

from __future__ import annotations

import asyncio
import inspect
import random
import secrets
import time
import tracemalloc
from types import SimpleNamespace

from protocols.announce import encode_announcement
from protocols.keys import window_of
from protocols.records import Announcement
from swarm.config import SwarmConfig
from swarm.exchange.gossip import GossipAnnouncements
from swarm.exchange.gossip_guard import (
    BURST,
    MAX_AGE_S,
    MAX_SEEN,
    PUBLISH_BURST,
    PUBLISH_RATE_PER_S,
    RATE_PER_S,
    SLOT_LIMIT,
    SLOT_S,
    GossipGuard,
)
from swarm.exchange.poller import PollGate
from swarm.exchange.shards import ShardPlan

T0 = 1_700_000_000.0  # wall-clock time the tests start at (a slot boundary)


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _guard(ban_s: float = 300.0, **kw) -> tuple[GossipGuard, Clock]:
    clock = Clock()
    return GossipGuard(ban_s, clock=clock, **kw), clock


def _ann(peer: str, created_at: float, i: int = 0) -> bytes:
    return encode_announcement(Announcement(peer=peer, window=window_of(created_at), count=1, nbytes=100,
                                            sha256=secrets.token_hex(32), policy_version=i, created_at=created_at))


def _honest_timeline(peer: str, seconds: float, every_s: float = 0.1) -> list[tuple[float, bytes]]:
    """What an honest peer gossips over `seconds` when its rounds end every `every_s`: its pace (GossipAnnouncements
    .publish) sends PUBLISH_BURST at once, then the newest one whenever a token is there."""
    out, tokens, t, last = [], float(PUBLISH_BURST), T0, T0
    while t < T0 + seconds:
        tokens = min(PUBLISH_BURST, tokens + (t - last) * PUBLISH_RATE_PER_S)
        last = t
        if tokens >= 1.0:
            tokens -= 1.0
            out.append((t, _ann(peer, t, len(out))))
        t += every_s
    return out


def test_replays_of_an_honest_peers_messages_never_count_against_it():
    timeline = _honest_timeline("honest", 600.0)  # ten minutes of rounds every 0.1 s, paced
    assert len(timeline) > 300
    guard, _ = _guard()
    for t, value in timeline:  # as gossiped: every one passes on to the receive rules
        assert guard.admit("honest", value, t) is None
    rng = random.Random(0)
    end = T0 + 600.0
    recent = [v for t, v in timeline if end - t <= MAX_AGE_S]
    old = [v for t, v in timeline if end - t > MAX_AGE_S + 1]
    for _ in range(3):  # replayed back, every one, in any order, again and again: duplicates or stale
        replay = [v for _, v in timeline]
        rng.shuffle(replay)
        verdicts = {guard.admit("honest", v, end) for v in replay}
        assert verdicts == {"gossip_duplicate", "gossip_stale"}
    assert guard.banned == 0 and not guard.is_banned("honest")
    assert all(guard.admit("honest", v, end + MAX_AGE_S + 1) == "gossip_stale" for v in recent)  # later: all stale
    assert guard.stale >= len(old) and guard.duplicates >= len(recent)

    fresh, _ = _guard()  # a receiver that never saw them (a newcomer; its daemon forgot them): all fresh ones at once
    replay = list(recent)
    rng.shuffle(replay)
    assert [fresh.admit("honest", v, end) for v in replay] == [None] * len(replay)
    assert fresh.banned == 0

    small, _ = _guard(max_seen=8)  # a seen-cache forced to forget (a crowd of other signers evicting it)
    for _ in range(5):
        for v in replay:
            assert small.admit("honest", v, end) in (None, "gossip_duplicate")
            for k in range(3):
                small.admit(f"other{k}", _ann(f"other{k}", end, k), end)
    assert small.banned == 0 and not small.is_banned("honest") and small.seen() <= 8


def test_a_signer_past_its_own_allowance_is_banned_and_dropped_unread_nothing_more():
    assert "disconnect" not in inspect.signature(GossipGuard).parameters  # the guard cannot cut a connection
    guard, clock = _guard()
    now = T0 + 3.0
    verdicts = [guard.admit("spammer", _ann("spammer", now, i), now) for i in range(SLOT_LIMIT + 5)]
    assert verdicts == [None] * SLOT_LIMIT + ["banned"] * 5 and guard.banned == 1 and guard.is_banned("spammer")
    assert guard.admit("spammer", _ann("spammer", now + 60, 99), now + 60) == "banned"  # even a fresh, valid one
    assert guard.admit("honest", _ann("honest", now, 0), now) is None  # others are not affected
    clock.t += 300.0  # the ban expires
    assert not guard.is_banned("spammer") and guard.banned_peers() == []
    assert guard.admit("spammer", _ann("spammer", now + 300, 100), now + 300) is None
    # the allowance is the signer's own timeline: SLOT_LIMIT per SLOT_S slot of created_at, whenever they arrive
    spread, _ = _guard()
    dated = [T0 + k * SLOT_S / SLOT_LIMIT for k in range(5 * SLOT_LIMIT)]  # exactly SLOT_LIMIT in each of 5 slots
    assert all(spread.admit("busy", _ann("busy", t, i), T0 + 50) is None for i, t in enumerate(dated))
    assert spread.banned == 0
    assert spread.admit("busy", _ann("busy", T0 + 1, 999), T0 + 50) == "banned"  # one more dated in the first slot
    assert SLOT_LIMIT == BURST + RATE_PER_S * SLOT_S


def test_what_is_not_an_announcement_of_its_signer_passes_uncounted():
    guard, _ = _guard()
    now = T0
    junk = [b"", b"\xc1", b"x" * 2000, _ann("someone-else", now), _ann("spammer", now + 3600)]  # … or dated ahead
    for _ in range(100):
        for value in junk:
            assert guard.admit("spammer", value, now) is None
    assert guard.admit("", _ann("spammer", now), now) is None  # no signer: the receive rules call it forged
    assert guard.banned == 0 and guard.seen() == 0


def test_zero_turns_bans_off_not_the_replay_checks_and_the_books_are_bounded_whatever_the_identities():
    off, _ = _guard(0.0)
    now = T0
    values = [_ann("spammer", now, i) for i in range(1000)]
    assert all(off.admit("spammer", v, now) is None for v in values) and off.banned == 0
    assert off.admit("spammer", values[0], now) == "gossip_duplicate"
    guard, clock = _guard(max_banned=4, max_seen=64)
    for i in range(200):  # fresh identities: each under its allowance, never banned, books bounded
        assert guard.admit(f"fresh{i}", _ann(f"fresh{i}", now, i), now) is None
        assert guard.seen() <= 64 and len(guard._counts) <= 64
    for i in range(10):  # ten floods: at most four bans held, the first ones out first
        k = 0
        while guard.admit(f"flood{i}", _ann(f"flood{i}", now, k), now) is None:
            k += 1
        clock.t += 1.0
    assert guard.banned == 10 and len(guard._bans) == 4 and guard.banned_peers() == [f"flood{i}" for i in range(6, 10)]
    # entries leave once every announcement their slot can date has gone stale, and their counts with them
    later = now + SLOT_S + MAX_AGE_S + 1
    assert guard.admit("late", _ann("late", later, 0), later) is None
    assert guard.seen() == 1 and list(guard._counts) == [("late", int(later // SLOT_S))]


def test_the_seen_cache_at_its_bound_holds_a_few_mib():
    guard, _ = _guard()
    peers = [f"Qm{k:044d}" for k in range(2048)]  # peer-id-sized signers, 8 announcements each
    values = [(peers[i % 2048], _ann(peers[i % 2048], T0 + (i % 100) / 10, i)) for i in range(MAX_SEEN + 100)]
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for signer, value in values:
        guard.admit(signer, value, T0 + 10)
    grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    assert guard.seen() == MAX_SEEN and guard.banned == 0
    assert grown < 5 << 20, f"{grown / 2**20:.1f} MiB"
    print(f"\nseen-cache at its bound ({MAX_SEEN} digests): {grown / 2**20:.2f} MiB")


def test_the_guards_verdicts_are_drops_by_reason_before_the_inbox():
    offered, dropped = [], []
    inbox = SimpleNamespace(offer=lambda value, sender, now: offered.append(sender) or False,
                            drop=lambda reason: dropped.append(reason), limits=None)
    spawned = []
    transport = SimpleNamespace(peer_id="me", inbox=inbox, cfg=SwarmConfig(gossip=True),
                                spawn=lambda coro: spawned.append(coro), _fetch_chosen=lambda: None)
    gossip = GossipAnnouncements(transport, SimpleNamespace(), ShardPlan("me", "rlswarm", 2, sharded=False))
    t = time.time()
    honest = _ann("honest", t)
    msgs = [SimpleNamespace(sender="honest", data=v) for v in (honest, honest, _ann("honest", t - 1000))]
    msgs += [SimpleNamespace(sender="spammer", data=_ann("spammer", t, i)) for i in range(SLOT_LIMIT + 5)]
    msgs.append(SimpleNamespace(sender="me", data=b"ours"))

    class Sub:
        topic = "rlswarm/announce/v2"

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
    assert offered == ["honest"] + ["spammer"] * SLOT_LIMIT
    assert dropped == ["gossip_duplicate", "gossip_stale"] + ["banned"] * 5
    assert gossip.received == len(msgs) - 1 and gossip.banned == 1 and spawned == []


def test_our_own_gossip_is_paced_to_half_the_allowance_and_the_newest_waiting_one_goes_out():
    """A node whose rounds are faster than the pace: the first PUBLISH_BURST announcements go at once, later ones
    wait for the next token, a newer one replacing the one waiting (counted `publish_paced`); so over any stretch
    it gossips at most PUBLISH_BURST + PUBLISH_RATE_PER_S × seconds, half of what every receiver's guard allows."""
    assert PUBLISH_BURST <= BURST / 2 and PUBLISH_RATE_PER_S <= RATE_PER_S / 2
    sent: list[bytes] = []

    async def run() -> GossipAnnouncements:
        loop = asyncio.get_running_loop()

        async def publish(topic: str, data: bytes) -> None:
            sent.append(data)

        transport = SimpleNamespace(peer_id="me", cfg=SwarmConfig(gossip=True),
                                    spawn=lambda coro: loop.create_task(coro))
        gossip = GossipAnnouncements(transport, SimpleNamespace(publish=publish), ShardPlan("me", "rlswarm", 2, sharded=False))
        for i in range(PUBLISH_BURST + 5):  # all within a few milliseconds
            await gossip.publish(b"%d" % i)
        assert len(sent) == PUBLISH_BURST  # the rest wait: only the newest of them will go
        await asyncio.sleep(1.2 / PUBLISH_RATE_PER_S)
        return gossip

    gossip = asyncio.run(run())
    assert sent == [b"%d" % i for i in range(PUBLISH_BURST)] + [b"%d" % (PUBLISH_BURST + 4)]
    assert (gossip.published, gossip.publish_paced) == (PUBLISH_BURST + 1, 4)
    # a receiver's guard with the default allowance never bans this pace, nor the same pace with its created_at
    # bunched by a clock stepping back a whole slot (every announcement dated SLOT_S earlier from half-way on)
    timeline = _honest_timeline("fast", 600.0)
    guard, _ = _guard()
    assert all(guard.admit("fast", v, t) is None for t, v in timeline) and guard.banned == 0
    stepped, _ = _guard()
    half = len(timeline) // 2
    bunched = timeline[:half] + [(t - SLOT_S, _ann("fast", t - SLOT_S, i)) for i, (t, _) in enumerate(timeline[half:])]
    assert all(stepped.admit("fast", v, t + SLOT_S) is None for t, v in bunched) and stepped.banned == 0


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
        gossip = GossipAnnouncements(transport, SimpleNamespace(), ShardPlan("me", "rlswarm", 2, sharded=False))
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
