"""Announcements over libp2p gossipsub, beside the DHT (`swarm.gossip`, off by default).

With `gossip` on, the transport's p2pd runs gossipsub (swarm.dht.peer starts it with pubsub,
swarm.net.pubsub) and this piece, on the transport's loop:
  - subscribes to the swarm's announcement topic, one per swarm and protocol version
    (protocols.keys.announce_topic), and offers every message to the Inbox exactly as a pushed
    announcement (`Inbox.offer(value, sender, now=...)`: signer binding, size, age, caps and quotas;
    swarm.exchange.receive), then runs the fan-in choice, never a DHT read. The signer is the sender
    whose pubsub signature our own daemon verified: its libp2p key, which is its announcement key
    (swarm.net.identity). Our own messages, which the daemon delivers to us too, are skipped;
  - publishes each new announcement of ours on the topic once, when its first DHT store starts
    (not in client mode, whose bundles travel by push: swarm.exchange.push).
The DHT stores and polls run as without it; a failed publish is counted (`publish_failures`) and
logged. The daemon relays what is well signed before we vet it (swarm.net.pubsub module docstring).
"""

from __future__ import annotations

import logging
import time

from protocols.keys import announce_topic
from protocols.records import SCHEMA_VERSION
from swarm.net.pubsub import Pubsub, PubsubError, Subscription

log = logging.getLogger(__name__)


class GossipAnnouncements:
    """Gossiped announcements of one HivemindTransport (module docstring); `await GossipAnnouncements.start(t)`."""

    def __init__(self, transport, pubsub: Pubsub, topic: str):
        self.transport = transport
        self.pubsub = pubsub
        self.topic = topic
        self.received = 0  # messages delivered on the topic, ours excluded
        self.offered = 0  # of those, new valid announcements (fetch candidates)
        self.published = 0
        self.publish_failures = 0

    @classmethod
    async def start(cls, transport) -> GossipAnnouncements:
        """Subscribe on the transport's loop (call it there); the receiving task is cancelled at its shutdown."""
        gossip = cls(transport, Pubsub.of(transport.p2p), announce_topic(transport.cfg.swarm_id, SCHEMA_VERSION))
        subscription = await gossip.pubsub.subscribe(gossip.topic)
        transport.spawn(gossip._receive(subscription))
        return gossip

    async def publish(self, value: bytes) -> None:
        """Gossip one announcement value of ours."""
        try:
            await self.pubsub.publish(self.topic, value)
            self.published += 1
        except (PubsubError, OSError) as exc:
            self.publish_failures += 1
            log.warning("gossiping our announcement failed: %r", exc)

    async def peers(self) -> list[str]:
        """The peers our daemon knows subscribe to the topic."""
        return await self.pubsub.peers(self.topic)

    async def _receive(self, subscription: Subscription) -> None:
        inbox = self.transport.inbox
        async with subscription:
            async for msg in subscription:
                if msg.sender == self.transport.peer_id:
                    continue
                self.received += 1
                if inbox.offer(msg.data, msg.sender or None, now=time.time()):
                    self.offered += 1
                    self.transport._fetch_chosen()  # the fan-in choice, as for a pushed announcement
        log.info("the gossip subscription to %s ended", self.topic)
