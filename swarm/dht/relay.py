"""A bootstrap peer that relays a swarm's gossiped announcements (`swarm bootstrap --gossip`).

gossipsub forwards a topic's messages only through peers that subscribe to it. A bootstrap peer is
the one peer every newcomer connects to; with `gossip` its p2pd runs pubsub (swarm.dht.peer) and
`GossipRelay` subscribes it to the swarm's announcement topic (protocols.keys.announce_topic), so the
bootstrap joins the topic's mesh and forwards messages between the peers connected through it. What
it costs: one thread with an asyncio loop, a P2P replica and one control connection to p2pd, and the
daemon's work of receiving, verifying and forwarding each message once per mesh peer (gossipsub's
degree, 6 by default, not the swarm's size); the messages delivered to us are counted and dropped.
The bootstrap vets no announcement and judges no publisher: its daemon checks each message's signature before
relaying (swarm.net.pubsub), and the receivers run the announcement rules and their own guard
(swarm.exchange.gossip_guard). It has no lever over what its daemon relays (p2pd offers no validator), and it
disconnects nobody: a disconnect on gossip counts would cut an honest peer whose signed messages someone replays.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from protocols.keys import announce_topic
from protocols.records import SCHEMA_VERSION
from swarm.net.pubsub import Pubsub

log = logging.getLogger(__name__)


class GossipRelay:
    """The subscription of one running DHT peer (started with pubsub) to a swarm's topic (module docstring)."""

    def __init__(self, dht, swarm_id: str, timeout_s: float = 30.0):
        self.topic = announce_topic(swarm_id, SCHEMA_VERSION)
        self.received = 0  # messages our daemon delivered to us on the topic (relayed or not)
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
        subscription = await self._pubsub.subscribe(self.topic)
        self._task = asyncio.create_task(self._drain(subscription))

    async def _drain(self, subscription) -> None:
        async with subscription:
            async for msg in subscription:
                self.received += 1

    def peers(self, timeout_s: float = 10.0) -> list[str]:
        """The peers our daemon knows subscribe to the topic."""
        return asyncio.run_coroutine_threadsafe(self._pubsub.peers(self.topic), self._loop).result(timeout_s)

    def close(self) -> None:
        """End the subscription and the loop (the DHT and its p2pd are the caller's)."""
        async def stop():
            task = getattr(self, "_task", None)
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
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
