"""Announcements over libp2p gossipsub, beside the DHT (`swarm.gossip`, on by default).

With `gossip` on, the transport's p2pd runs gossipsub (swarm.dht.peer starts it with pubsub,
swarm.net.pubsub) and this piece, on the transport's loop:
  - subscribes to the swarm's announcement topic, one per swarm and protocol version
    (protocols.keys.announce_topic), and offers every message to the Inbox exactly as a pushed
    announcement (`Inbox.offer(value, sender, now=...)`: signer binding, size, age, caps and quotas;
    swarm.exchange.receive), then runs the fan-in choice, never a DHT read (in a swarm of more than 16
    gossiping peers after a random wait that grows with them, `swarm.gossip_fetch_spread_s`: _choose_soon). The signer is the sender
    whose pubsub signature our own daemon verified: its libp2p key, which is its announcement key
    (swarm.net.identity). Our own messages, which the daemon delivers to us too, are skipped;
  - publishes each new announcement of ours on the topic once, when its first DHT store starts
    (not in client mode, whose bundles travel by push: swarm.exchange.push).
Before the Inbox, the guard (swarm.exchange.gossip_guard) drops an announcement it has had already
(`gossip_duplicate`) or that is more than 2 minutes old (`gossip_stale`) without counting it against its signer — a
replay of a peer's signed messages is never held against that peer — and a signer that itself signed more than its
allowance is banned for `swarm.gossip_ban_s`: its gossip is then dropped unread (`banned`; counter `banned`), nothing
more (no disconnect). The DHT stores run as without it (every peer's announcement is in the DHT, whatever its transport);
the DHT polls back off while gossip delivers and every peer seen lately gossips (swarm.exchange.poller: the
modes gossip / mixed / dht; `_delivered` tells the PollGate which peers gossip delivered from). A failed
publish is counted (`publish_failures`) and logged. The daemon relays what is well signed before we vet it (swarm.net.pubsub
module docstring).

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

from protocols.codec import RecordError
from protocols.keys import announce_topic
from protocols.records import SCHEMA_VERSION
from swarm.bucket import TokenBucket
from swarm.exchange.admission import TOTAL_STREAMS
from swarm.exchange.gossip_guard import PUBLISH_BURST, PUBLISH_RATE_PER_S, GossipGuard
from swarm.exchange.receive import vet_announcement
from swarm.net.pubsub import Pubsub, PubsubError, Subscription

log = logging.getLogger(__name__)
STRANGER_STREAMS = TOTAL_STREAMS // 2  # bundle streams a publisher admits at once from peers not in its good standing
SPREAD_MAX = 3.0  # the fetch spread is at most this many times swarm.gossip_fetch_spread_s


class GossipAnnouncements:
    """Gossiped announcements of one HivemindTransport (module docstring); `await GossipAnnouncements.start(t)`."""

    def __init__(self, transport, pubsub: Pubsub, topic: str):
        self.transport = transport
        self.pubsub = pubsub
        self.topic = topic
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
        """Subscribe on the transport's loop (call it there); the receiving task is cancelled at its shutdown."""
        gossip = cls(transport, Pubsub.of(transport.p2p), announce_topic(transport.cfg.swarm_id, SCHEMA_VERSION))
        subscription = await gossip.pubsub.subscribe(gossip.topic)
        transport.spawn(gossip._receive(subscription))
        return gossip

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
        try:
            await self.pubsub.publish(self.topic, value)
            self.published += 1
        except (PubsubError, OSError) as exc:
            self.publish_failures += 1
            log.warning("gossiping our announcement failed: %r", exc)

    async def peers(self) -> list[str]:
        """The peers our daemon knows subscribe to the topic."""
        return await self.pubsub.peers(self.topic)

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
        async with subscription:
            async for msg in subscription:
                if msg.sender == self.transport.peer_id:
                    continue
                self.received += 1
                self.received_bytes += len(msg.data)
                now = time.time()
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
        log.info("the gossip subscription to %s ended", self.topic)


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
    and the counters' increase since the previous take."""

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
        return {"transport": "gossip" if gossip else "dht", "pubsub": gossip is not None,
                "fallback": transport.gossip_fallback, "delivering": mode != "dht", "mode": mode,
                "poll_only_peers": gate.poll_only_peers(t), **out}
