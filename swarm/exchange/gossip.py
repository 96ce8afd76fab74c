"""Announcements over libp2p gossipsub, beside the DHT (`swarm.gossip`, on by default).

With `gossip` on, the transport's p2pd runs gossipsub (swarm.dht.peer starts it with pubsub,
swarm.net.pubsub) and this piece, on the transport's loop:
  - subscribes to the topics of its announcement shards (swarm.exchange.shards: its own shard, nested one level
    either way, `gossip_extra_shards` rotating ones, and the previous version's one topic; `gossip_shards` off:
    that topic alone) and offers every message to the Inbox exactly as a pushed announcement
    (`Inbox.offer(value, sender, now=...)`: signer binding, size, age, caps and quotas; swarm.exchange.receive),
    then runs the fan-in choice, never a DHT read (in a swarm of more than 16 gossiping peers after a random wait
    that grows with them, `swarm.gossip_fetch_spread_s`, 0 by default: _choose_soon). The signer is the sender
    whose pubsub signature our own daemon verified: its libp2p key, which is its announcement key
    (swarm.net.identity). Our own messages, which the daemon delivers to us too, are skipped;
  - publishes each new announcement of ours once, on its home shard's topic (and the legacy topic while a peer of
    the previous version is heard there), when its first DHT store starts (not in client mode, whose bundles
    travel by push: swarm.exchange.push). Bundles never ride the mesh: they are pulled over a direct stream;
  - every SHARD_CHECK_S: estimates the swarm's size (swarm.dht.size, in the DHT process, or the peers the Inbox
    has seen, whichever is larger), moves its shards when the level or a rotation says so (subscribing to the new
    topics before leaving the old), and dials up to TOPIC_DIALS known peers of a shard whose topic our daemon
    knows fewer than TOPIC_PEERS subscribers of (gossipsub meshes form only among connected peers).
Before the Inbox, the guard (swarm.exchange.gossip_guard) drops an announcement it has had already
(`gossip_duplicate`: also the copy that came on a second topic) or that is more than 2 minutes old (`gossip_stale`)
without counting it against its signer — a replay of a peer's signed messages is never held against that peer — and
a signer that itself signed more than its allowance is banned for `swarm.gossip_ban_s`: its gossip is then dropped
unread (`banned`; counter `banned`), nothing more (no disconnect). The DHT stores run as without it (every peer's
announcement is in the DHT, whatever its transport); the DHT polls back off while gossip delivers and every peer seen
lately gossips (swarm.exchange.poller: the modes gossip / mixed / dht; `_delivered` tells the PollGate which peers
gossip delivered from). A failed publish is counted (`publish_failures`) and logged. The daemon relays what is well
signed before we vet it (swarm.net.pubsub module docstring).

Fallback: `start_gossip` returns no GossipAnnouncements, and the reason, when the daemon runs without
pubsub (a p2pd that refused the pubsub flags is started again without them: swarm.dht.peer) or the
subscription fails; the transport then announces and polls through the DHT alone, logs the reason
once and reports it in every take (`GossipReport`: the metrics line's `announce_transport` and `gossip`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time

from protocols.announce import decode_announcement
from protocols.codec import RecordError
from protocols.keys import ann_shard
from protocols.records import SCHEMA_VERSION
from swarm.bucket import TokenBucket
from swarm.dht.size import estimate_peers
from swarm.exchange.admission import TOTAL_STREAMS
from swarm.exchange.gossip_guard import PUBLISH_BURST, PUBLISH_RATE_PER_S, GossipGuard
from swarm.exchange.receive import vet_announcement
from swarm.exchange.shards import ShardPlan
from swarm.net.dial import connect
from swarm.net.pubsub import Pubsub, PubsubError, Subscription

log = logging.getLogger(__name__)
STRANGER_STREAMS = TOTAL_STREAMS // 2  # bundle streams a publisher admits at once from peers not in its good standing
SPREAD_MAX = 3.0  # the fetch spread is at most this many times swarm.gossip_fetch_spread_s
SHARD_CHECK_S = 30.0  # how often the size estimate, the shard topics and their meshes are looked at
TOPIC_PEERS = 4  # a shard topic whose subscribers our daemon knows fewer of is thin …
TOPIC_DIALS = 2  # … and this many of its peers we have seen are dialled per check


class GossipAnnouncements:
    """Gossiped announcements of one HivemindTransport (module docstring); `await GossipAnnouncements.start(t)`."""

    def __init__(self, transport, pubsub: Pubsub, plan: ShardPlan):
        self.transport = transport
        self.pubsub = pubsub
        self.plan = plan  # which topics (swarm.exchange.shards)
        self._subs: dict[str, Subscription] = {}  # topic → our subscription to it
        self.resubscribed = 0  # topics subscribed to after the start (a level change or a rotation)
        self.topic_dials = 0  # peers of a thin shard dialled so that its mesh forms
        self.received = 0  # messages delivered on the topic, ours excluded
        self.received_bytes = 0  # their data bytes
        self.offered = 0  # of those, new valid announcements (fetch candidates)
        self.published = 0
        self.publish_failures = 0
        # time.monotonic() of the last valid announcement gossip delivered, new or already had by a push or the DHT:
        # while recent, the DHT polls back off (swarm.exchange.poller)
        self.last_valid: float | None = None
        # replays dropped, a signer over its allowance banned (swarm.exchange.gossip_guard)
        self.guard = GossipGuard(transport.cfg.gossip_ban_s, max_skew_s=transport.cfg.max_clock_skew_s)
        # our own pace (publish): a token bucket of PUBLISH_BURST, the newest announcement past it waiting
        self._pace = TokenBucket(PUBLISH_RATE_PER_S, PUBLISH_BURST, time.monotonic())
        self._waiting: bytes | None = None
        self._flushing = False
        self.publish_paced = 0  # announcements of ours replaced by a newer one while waiting for the pace
        self._choosing = False  # a fan-in choice is waiting out its spread (_choose_soon)
        self._peers_n, self._peers_at = 0, float("-inf")  # _peers(), and when it was counted
        self.fetch_spread = 0  # fan-in choices after a gossiped announcement that waited out a spread (_choose_soon)

    banned = property(lambda self: self.guard.banned)

    @classmethod
    async def start(cls, transport) -> GossipAnnouncements:
        """Subscribe on the transport's loop (call it there); the receiving tasks and the shard upkeep are cancelled
        at its shutdown."""
        cfg = transport.cfg
        plan = ShardPlan(transport.peer_id, cfg.swarm_id, SCHEMA_VERSION, per_shard=cfg.gossip_shard_peers,
                         extra=cfg.gossip_extra_shards, rotate_s=cfg.gossip_rotate_s,
                         fixed_level=cfg.gossip_shard_level, sharded=cfg.gossip_shards)
        gossip = cls(transport, Pubsub.of(transport.p2p), plan)
        await gossip._estimate()
        await gossip._subscribe(plan.subscriptions(time.time()))
        transport.spawn(gossip._upkeep())
        return gossip

    @property
    def topics(self) -> list[str]:
        """The topics we subscribe to now."""
        return list(self._subs)

    @property
    def topic(self) -> str:
        """Our home shard's topic: where our announcements go (swarm.exchange.shards)."""
        return self.plan.home

    @property
    def level(self) -> int:
        """The level named in our announcements (-1: `gossip_shards` off, none named)."""
        return self.plan.level if self.plan.sharded else -1

    async def _subscribe(self, topics: list[str]) -> None:
        """Subscribe to `topics` we are not subscribed to yet, then leave those we are subscribed to and that are not
        among them (the new ones first: no gap in what reaches us)."""
        for topic in topics:
            if topic not in self._subs:
                self._subs[topic] = await self.pubsub.subscribe(topic)
                self.transport.spawn(self._receive(self._subs[topic]))
        for topic in [t for t in self._subs if t not in topics]:
            await self._subs.pop(topic).close()

    async def _estimate(self) -> bool:
        """One estimate of the swarm's size for the plan: the DHT's (swarm.dht.size) or the peers seen, the larger."""
        t = self.transport
        try:
            dht = await asyncio.wait_for(t.dht.run_coroutine(estimate_peers, return_future=True), t.cfg.dht_timeout_s)
        except Exception as exc:  # a DHT hiccup: the next check estimates again
            log.debug("estimating the swarm's size failed: %r", exc)
            dht = 0.0
        return self.plan.estimate(max(float(dht), float(t.inbox.peers_seen() + 1)))

    async def _upkeep(self) -> None:
        """Every SHARD_CHECK_S: the size estimate, the topics it and the rotation call for, and dials into thin
        shards (module docstring)."""
        while True:
            await asyncio.sleep(SHARD_CHECK_S)
            try:
                await self._estimate()
                before = set(self._subs)
                await self._subscribe(self.plan.subscriptions(time.time()))
                self.resubscribed += len(set(self._subs) - before)
                await self._dial_thin_shards()
            except asyncio.CancelledError:
                raise
            except Exception:  # our bug, not a peer's: keep gossiping on the topics we have
                log.exception("keeping our gossip shards failed")

    async def _dial_thin_shards(self) -> None:
        """For each of our shard topics whose subscribers our daemon knows fewer than TOPIC_PEERS of, dial up to
        TOPIC_DIALS peers we have seen whose own shard it is (at that level) and that we are not meshed with."""
        t = self.transport
        for topic in list(self._subs):
            where = self.plan.shard_of_topic(topic)
            if where is None:
                continue
            subscribers = set(await self.pubsub.peers(topic))
            if len(subscribers) >= TOPIC_PEERS:
                continue
            level, shard = where
            mates = [p for p in t.inbox.known_peers() if p not in subscribers and p != t.peer_id
                     and ann_shard(p, level) == shard and t.inbox.addrs_of(p)][:TOPIC_DIALS]
            for peer in mates:
                self.topic_dials += 1
                try:
                    await asyncio.wait_for(connect(t.p2p, peer, t.inbox.addrs_of(peer), t.dials), t.cfg.fetch_timeout_s)
                except Exception as exc:  # unreachable: the next check tries others
                    log.debug("dialling %s for topic %s failed: %r", peer[:12], topic, exc)

    async def publish(self, value: bytes) -> None:
        """Gossip one announcement value of ours, paced to half of every receiver's allowance (PUBLISH_RATE_PER_S,
        PUBLISH_BURST): a node whose rounds are faster than that is never banned by an honest peer's guard. Past
        the pace, the newest announcement waits for the next token and replaces any older one still waiting
        (counted `publish_paced`); the DHT store and the pushes of each one run as usual."""
        if self._waiting is not None or not self._pace.take(1.0, time.monotonic()):
            if self._waiting is not None:
                self.publish_paced += 1  # the older one waiting is replaced, never sent
            self._waiting = value
            if not self._flushing:
                self._flushing = True
                self.transport.spawn(self._flush())
            return
        await self._send(value)

    async def _flush(self) -> None:
        """Send the newest waiting announcement once a token is there."""
        try:
            while not self._pace.take(1.0, time.monotonic()):
                await asyncio.sleep(self._pace.wait_s(1.0, time.monotonic()))
            value, self._waiting = self._waiting, None
            if value is not None:
                await self._send(value)
        finally:
            self._flushing = False

    async def _send(self, value: bytes) -> None:
        for topic in self.plan.publish_topics(time.time()):
            try:
                await self.pubsub.publish(topic, value)
                self.published += 1
            except (PubsubError, OSError) as exc:
                self.publish_failures += 1
                log.warning("gossiping our announcement on %s failed: %r", topic, exc)

    async def peers(self, topic: str | None = None) -> list[str]:
        """The peers our daemon knows subscribe to `topic` (default: our home shard's)."""
        return await self.pubsub.peers(topic or self.plan.home)

    def _choose_soon(self) -> None:
        """Run the fan-in choice at once in a swarm of up to STRANGER_STREAMS gossiping peers; in a larger one after
        a random 0 to `gossip_fetch_spread_s` × (peers / STRANGER_STREAMS − 1) seconds (at most SPREAD_MAX times the
        setting; one timer at a time: what arrives meanwhile is chosen from with it). Gossip reaches every receiver
        within milliseconds, and a publisher admits STRANGER_STREAMS bundle streams at once from peers not in its
        good standing: without the wait, the receivers past that are refused and count the publisher failed."""
        spread = self.transport.cfg.gossip_fetch_spread_s * min(SPREAD_MAX, self._peers() / STRANGER_STREAMS - 1)
        if spread <= 0:
            self.transport._fetch_chosen()
        elif not self._choosing:
            self._choosing = True
            self.fetch_spread += 1
            self.transport.spawn(self._choose_after(random.uniform(0.0, spread)))

    def _peers(self) -> int:
        """Peers gossip delivered a valid announcement from within the quiet window (counted at most once a second)."""
        now = time.monotonic()
        if now - self._peers_at >= 1.0:
            gate = self.transport.poll_gate
            self._peers_n = sum(1 for _ in itertools.takewhile(lambda t: now - t <= gate.quiet_s,
                                                               reversed(gate.gossiped.values())))
            self._peers_at = now
        return self._peers_n

    async def _choose_after(self, delay_s: float) -> None:
        try:
            await asyncio.sleep(delay_s)
        finally:
            self._choosing = False
        self.transport._fetch_chosen()

    def _delivered(self, sender: str) -> None:
        """A valid announcement of `sender` arrived by gossip: gossip delivers, and from that peer (PollGate)."""
        self.last_valid = time.monotonic()
        self.transport.poll_gate.saw_gossip(sender, self.last_valid)

    async def _receive(self, subscription: Subscription) -> None:
        inbox = self.transport.inbox
        legacy = subscription.topic == self.plan.legacy
        async with subscription:
            async for msg in subscription:
                if msg.sender == self.transport.peer_id:
                    continue
                self.received += 1
                self.received_bytes += len(msg.data)
                now = time.time()
                if legacy and self.plan.sharded and _unsharded(msg.data, msg.sender):
                    self.plan.heard_legacy(now)  # a previous-version peer: we publish on its topic too
                reason = self.guard.admit(msg.sender, msg.data, now)
                if reason is not None:  # banned, gossip_duplicate or gossip_stale: never reaches the Inbox
                    inbox.drop(reason)
                    continue
                if inbox.offer(msg.data, msg.sender or None, now=now):
                    self.offered += 1
                    self._delivered(msg.sender)
                    self._choose_soon()  # the fan-in choice, as for a pushed announcement, a moment later
                elif _valid(msg.data, msg.sender or None, inbox.limits, now):
                    self._delivered(msg.sender)
        log.info("the gossip subscription to %s ended", subscription.topic)


def _unsharded(value: bytes, sender: str) -> bool:
    """An announcement of its own sender that names no shard level: a previous-version peer's (swarm.exchange.shards)."""
    try:
        ann = decode_announcement(value)
    except RecordError:
        return False
    return ann.peer == sender and ann.level < 0


def _valid(value: bytes, sender: str | None, limits, now: float) -> bool:
    """An announcement the receive rules accept, though not new to us (a push or the DHT brought it first)."""
    try:
        vet_announcement(value, sender, limits, now=now)
    except RecordError:
        return False
    return True


async def start_gossip(transport) -> tuple[GossipAnnouncements | None, str | None]:
    """The transport's gossip, or (None, why not) when pubsub is unavailable (module docstring: Fallback)."""
    if not getattr(transport.dht, "pubsub", False):
        why = "p2pd did not start with pubsub"
    else:
        try:
            return await GossipAnnouncements.start(transport), None
        except (PubsubError, OSError, TimeoutError) as exc:
            why = f"subscribing to the announcement topic failed: {exc}"
    log.warning("gossip is on but unavailable (%s); announcing and polling through the DHT alone", why)
    return None, why


class GossipReport:
    """What one take reports of how announcements travel (Delivery.announce): `transport` ("gossip" while our
    pubsub runs, else "dht") and, with `swarm.gossip` on, whether pubsub runs, its fallback reason, whether gossip
    delivers, the poll mode (`gossip`, `mixed` or `dht`: swarm.exchange.poller), the peers seen only by polling,
    our announcement-shard level and the topics we subscribe to (swarm.exchange.shards), and the counters'
    increase since the previous take."""

    COUNTED = ("received", "offered", "published", "publish_failures", "publish_paced", "received_bytes", "banned",
               "fetch_spread")

    def __init__(self):
        self._before: dict[str, int] = {}

    def since_last(self, transport) -> dict:
        gossip = transport.gossip
        if not transport.cfg.gossip:
            return {"transport": "dht"}
        now = {k: getattr(gossip, k) for k in self.COUNTED} if gossip else dict.fromkeys(self.COUNTED, 0)
        now["dht_polls_skipped"] = transport.poll_gate.skipped
        out = {k: v - self._before.get(k, 0) for k, v in now.items()}
        self._before = now
        gate, t = transport.poll_gate, time.monotonic()
        mode = gate.mode(gossip.last_valid, t) if gossip is not None else "dht"
        shards = {"level": gossip.level, "topics": len(gossip.topics)} if gossip is not None else {}
        return {"transport": "gossip" if gossip else "dht", "pubsub": gossip is not None,
                "fallback": transport.gossip_fallback, "delivering": mode != "dht", "mode": mode,
                "poll_only_peers": gate.poll_only_peers(t), **shards, **out}
