"""The weight channel on hivemind: a learner's signed DHT announcement and its weights over a libp2p stream
(docs/PROTOCOL.md §10, swarm.weights.channel for the rules).

It lives on a running swarm.exchange.hivemind.HivemindTransport — the same identity, DHT, p2p replica and asyncio
loop — which opens it for the node (its `open_weights`; this module imports no transport):

    learner   publish(): keeps the bytes of its newest `keep` versions in memory, serves them on
              WEIGHTS_NAME (the bundle stream's framing: request, header, ≤ 1 MiB data frames), stores
              the announcement under "{swarm}/weights/{own peer id}" with its owner subkey (expiring at
              now + ttl_s, or later than the entry the DHT holds for it: swarm.dht.expiry), stores it
              again every ttl_s / 3 so it outlives the DHT expiration while the learner lives, and pushes
              it (NOTIFY_NAME, one ≤ 1 KiB frame) to the `notify_peers` peers it has seen most recently
              (its samplers publish rollouts, so it sees them)
    sampler   a background task reads the followed learners' keys every poll_interval_s inside the DHT
              process (signer peer ids, ≤ 8 entries per key), runs WeightBook.offer on each, and fetches
              the chosen weights one at a time: the size is checked against the cap before the
              fetch, each frame's length before it is read, the running total against the announced
              size, the digest at the end (swarm.net.wire.fetch_bundle), all under fetch_timeout_s; a
              pushed announcement goes through the same rules, attributed to the stream's peer

The push saves a sampler up to a poll interval per version; the DHT copy serves samplers that start
later or missed a push.

Nothing a peer sends raises out of here: failures are counted by WeightBook.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, OrderedDict
from functools import partial

from protocols.weights import WeightAnnouncement, weights_key
from swarm.dht.expiry import Expirations, stored_expiration
from swarm.dht.peer import read_keys
from swarm.net import wire
from swarm.net.wire import notify
from swarm.weights.channel import (
    WeightBook,
    WeightLimits,
    WeightUpdate,
    make_weight_announcement,
)

log = logging.getLogger(__name__)
WEIGHTS_NAME = "/rlswarm/weights/2"  # libp2p protocol id of the weight stream
NOTIFY_NAME = "/rlswarm/weights-notify/2"  # libp2p protocol id of a weight announcement's push
_ENTRIES_PER_KEY = 8  # values read from one learner's key per poll (its own, plus any forgeries)


class HivemindWeights:
    """WeightChannel (swarm.weights.channel) on a started HivemindTransport (`transport`: its p2p, loop, DHT,
    admission and inbox are what this channel uses)."""

    def __init__(self, transport, *, follow: list[str] = (), fmt: str = "full",
                 limits: WeightLimits | None = None, poll_interval_s: float = 1.0, fetch_timeout_s: float = 300.0,
                 ttl_s: float = 3600.0, keep: int = 2, notify_peers: int = 64):
        self.transport, self.peer_id = transport, transport.peer_id
        self.swarm_id = transport.cfg.swarm_id
        self.follow = list(follow)
        self.book = WeightBook(self.follow, fmt, limits or WeightLimits())
        self.poll_interval_s, self.fetch_timeout_s, self.ttl_s, self.keep = poll_interval_s, fetch_timeout_s, ttl_s, keep
        self.notify_peers = notify_peers
        self._served: OrderedDict[str, bytes] = OrderedDict()  # sha256 → weight bytes, newest last
        self._announced: tuple[WeightAnnouncement, bytes] | None = None
        self.fetched_bytes = 0  # weight bytes fetched and verified (for measurements)
        self._expirations = Expirations()
        self.clock = time.time  # our clock for what we publish (tests skew it)
        transport.run_on_loop(self._start(), transport.cfg.startup_timeout_s)

    async def _start(self) -> None:
        await self.transport.p2p.add_binary_stream_handler(WEIGHTS_NAME,
                                                           self.transport.admitted(WEIGHTS_NAME, self._handle))
        self._handlers = [WEIGHTS_NAME]
        self._background = [self.transport.spawn(self._refresh_forever())]
        if self.follow:
            await self.transport.p2p.add_binary_stream_handler(
                NOTIFY_NAME, self.transport.admitted(NOTIFY_NAME, self._handle_notify))
            self._handlers.append(NOTIFY_NAME)
            self._background.append(self.transport.spawn(self._poll_forever()))

    # ------------------------------------------------------------------ learner side

    def publish(self, version: int, data: bytes, fmt: str) -> WeightAnnouncement:
        ann, value = make_weight_announcement(self.peer_id, version, data, fmt, now=self.clock())
        self._served[ann.sha256] = data
        while len(self._served) > self.keep:
            self._served.popitem(last=False)
        self._announced = (ann, value)
        try:  # a read of our own entry, then the store: two DHT calls
            stored = self.transport.run_on_loop(self._store(value), 2 * self.transport.cfg.dht_timeout_s)
        except TimeoutError:
            stored = False
        if not stored:
            log.warning("no DHT node accepted our weight announcement (v%d); the next refresh retries", version)
        return ann

    async def _store(self, value: bytes) -> bool:
        """Store `value` under our key with an expiration later than the entry the DHT holds for us (swarm.dht.expiry:
        an announcement stored while our clock was ahead must not lock the slot), after pushing it."""
        for peer in self.transport.inbox.push_targets(self.notify_peers):
            self.transport.spawn(notify(self.transport.open_stream, peer, NOTIFY_NAME, value,
                                        self.transport.cfg.fetch_timeout_s))
        key, subkey = weights_key(self.swarm_id, self.peer_id), self.transport.signing_subkey
        try:
            held = await asyncio.wait_for(self.transport.dht.run_coroutine(
                partial(stored_expiration, key=key, subkey=subkey), return_future=True), self.transport.cfg.dht_timeout_s)
        except Exception as exc:  # not read: the store below still wins over every store of this process
            log.info("reading our weight announcement's expiration failed: %r", exc)
            held = None
        expiration = self._expirations.next(key, self.clock() + self.ttl_s, held)
        fut = self.transport.dht.store(key, value, expiration_time=expiration, subkey=subkey, return_future=True)
        return bool(await fut)

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self.ttl_s / 3)
            if self._announced is not None:
                try:
                    await asyncio.wait_for(self._store(self._announced[1]), 2 * self.transport.cfg.dht_timeout_s)
                except Exception as exc:  # a DHT hiccup: the next refresh retries
                    log.info("refreshing the weight announcement failed: %r", exc)

    def _lookup(self, swarm: str, sha256: str) -> bytes | None:
        return self._served.get(sha256) if swarm == self.swarm_id else None

    async def _handle(self, info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requester = info.peer_id.to_base58()
        await wire.serve_stream(reader, writer, self._lookup, self.fetch_timeout_s, "weights",
                                allow=lambda sha: self.transport.served_to(requester, sha))

    # ------------------------------------------------------------------ sampler side

    async def _handle_notify(self, info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            value = await asyncio.wait_for(wire.read_notification(reader), self.transport.cfg.fetch_timeout_s)
        except (asyncio.TimeoutError, ConnectionError, wire.FetchError):
            return  # a push is only a hint: the DHT copy is read anyway
        finally:
            writer.close()
        signer = info.peer_id.to_base58()
        ann = self.book.offer(signer, signer, value, time.time())  # ignored unless we follow that peer
        if ann is not None:
            self.transport.spawn(self._fetch(ann))

    async def _poll_forever(self) -> None:
        keys = {weights_key(self.swarm_id, learner): learner for learner in self.follow}
        while True:
            try:
                found = await asyncio.wait_for(self.transport.dht.run_coroutine(
                    partial(read_keys, keys=list(keys), per_key=_ENTRIES_PER_KEY), return_future=True),
                    self.transport.cfg.dht_timeout_s)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a DHT hiccup: the next tick retries
                log.info("reading the learners' weight keys failed: %r", exc)
                found = {}
            now = time.time()
            for key, entries in found.items():
                for signer, value in entries:
                    ann = self.book.offer(keys[key], signer, value, now)
                    if ann is not None:
                        await self._fetch(ann)
            await asyncio.sleep(self.poll_interval_s)

    async def _fetch(self, ann: WeightAnnouncement) -> None:
        data, reason, writer = None, "fetch_failed", None
        try:
            async def fetch() -> bytes:
                nonlocal writer
                reader, writer = await self.transport.open_stream(ann.peer, WEIGHTS_NAME)
                return await wire.fetch_bundle(reader, writer, swarm=self.swarm_id, sha256=ann.sha256,
                                               nbytes=ann.nbytes)
            data = await asyncio.wait_for(fetch(), self.fetch_timeout_s)
        except wire.FetchError as exc:
            reason = "digest_mismatch" if exc.reason == "digest_mismatch" else "fetch_failed"
            log.info("fetching weights v%d from %s: %s", ann.version, ann.peer[:12], exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # unreachable learner, daemon error, timeout: counted, never raised
            log.info("fetching weights v%d from %s failed: %r", ann.version, ann.peer[:12], exc)
        finally:
            if writer is not None:
                writer.close()
        if self.book.settle(ann, data, reason):
            self.fetched_bytes += len(data)

    def take(self) -> WeightUpdate | None:
        return self.book.take()

    def take_drops(self) -> Counter:
        return self.book.take_drops()

    def close(self) -> None:
        """Stop polling and serving on the transport (which goes on running); its shutdown does it too."""
        try:
            self.transport.run_on_loop(self._stop(), self.transport.cfg.dht_timeout_s)
        except Exception as exc:  # the transport is already gone: nothing is left to stop
            log.debug("closing the weight channel: %r", exc)

    async def _stop(self) -> None:
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        for name in self._handlers:
            await self.transport.p2p.remove_binary_stream_handler(name)
