"""A bootstrap peer that relays a swarm's gossiped announcements (`swarm bootstrap --gossip`).

gossipsub forwards a topic's messages only through peers that subscribe to it. A bootstrap peer is
the one peer every newcomer connects to; with `gossip` its p2pd runs pubsub (swarm.dht.peer) and
`GossipRelay` subscribes it to the swarm's announcement topics — the previous version's one topic
(protocols.keys.announce_topic) and every announcement shard of levels 0 to RELAY_LEVEL
(protocols.keys.ann_topic: 1 + 2 + 4 + 8 topics, the levels of swarms up to about 16 × 32 peers) — so the
bootstrap joins those meshes and forwards messages between the peers connected through it. Shards of
higher levels (larger swarms) are left to their own peers, who find each other by the DHT and by dialling
peers of their shard (swarm.exchange.gossip): a bootstrap that joined every shard would carry the whole
swarm's announcements. What it costs: one thread with an asyncio loop, a P2P replica and one control
connection per topic to p2pd, and the daemon's work of receiving, verifying and forwarding each message
once per mesh peer (gossipsub's degree, 6 by default, not the swarm's size); the messages delivered to
us are counted and dropped.
The bootstrap vets no announcement and judges no publisher: its daemon checks each message's signature before
relaying (swarm.net.pubsub), and the receivers run the announcement rules and their own guard
(swarm.exchange.gossip_guard). It has no lever over what its daemon relays (p2pd offers no validator), and it
disconnects nobody: a disconnect on gossip counts would cut an honest peer whose signed messages someone replays.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from protocols.keys import ann_topic, announce_topic
from protocols.records import SCHEMA_VERSION
from swarm.net.pubsub import Pubsub

log = logging.getLogger(__name__)
RELAY_LEVEL = 3  # the bootstrap relays every announcement shard of levels 0 … this


def relayed_topics(swarm_id: str) -> list[str]:
    """The topics a bootstrap relays: the legacy one and every shard of levels 0 … RELAY_LEVEL."""
    return [announce_topic(swarm_id, SCHEMA_VERSION)] + [
        ann_topic(swarm_id, SCHEMA_VERSION, level, shard) for level in range(RELAY_LEVEL + 1)
        for shard in range(1 << level)]


class GossipRelay:
    """The subscriptions of one running DHT peer (started with pubsub) to a swarm's topics (module docstring)."""

    def __init__(self, dht, swarm_id: str, timeout_s: float = 30.0):
        self.topics = relayed_topics(swarm_id)
        self.topic = self.topics[0]  # the legacy topic
        self.received = 0  # messages our daemon delivered to us on the topics (relayed or not)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="gossip-relay", daemon=True)
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._start(dht), self._loop).result(timeout_s)
        except BaseException:
            self.close()
            raise

    async def _start(self, dht) -> None:
        self._p2p = await dht.replicate_p2p()
        self._pubsub = Pubsub.of(self._p2p)
        self._tasks = [asyncio.create_task(self._drain(await self._pubsub.subscribe(t))) for t in self.topics]

    async def _drain(self, subscription) -> None:
        async with subscription:
            async for msg in subscription:
                self.received += 1

    def peers(self, timeout_s: float = 10.0, topic: str | None = None) -> list[str]:
        """The peers our daemon knows subscribe to `topic` (default: the legacy topic)."""
        return asyncio.run_coroutine_threadsafe(self._pubsub.peers(topic or self.topic), self._loop).result(timeout_s)

    def close(self) -> None:
        """End the subscription and the loop (the DHT and its p2pd are the caller's)."""
        async def stop():
            tasks = getattr(self, "_tasks", [])
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            p2p = getattr(self, "_p2p", None)
            if p2p is not None:
                await p2p.shutdown()  # a replica: closes our client connection, not the daemon

        if self._loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
            except Exception as exc:  # stopping anyway
                log.debug("gossip relay: %r", exc)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()
