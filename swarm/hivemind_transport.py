"""The swarm transport on hivemind: signed DHT announcements + bundle bytes over libp2p streams (docs/ARCHITECTURE.md §5).

    publish(r, records):  bundle = encode_bundle(records); keep it in memory (last `serve_rounds`
                          rounds); DHT.store(key="{swarm}/rollouts/{r}", subkey="[owner:<our RSA key>]",
                          value=encode_announcement(…) (< 1 KiB), expiration=now + announce_ttl_s)
    background poller:    every poll_interval_s, DHT.get(key, latest=True) for the watched rounds;
                          each new (subkey, value) is vetted (swarm.transport rules), then fetched over
                          the stream protocol swarm.wire.HANDLER_NAME from the peer the subkey names
    gather(rounds, T, k): waits on the inbox (at most T) and hands out settled bundles once

One RSA key (swarm.identity) is both the libp2p identity and the DHT signing key, so the peer id
a receiver derives from the signed subkey is the peer it dials for the bytes, and the ``peer``
field of every record must equal it.

Threads and processes: hivemind's DHT runs in a child process (fork) and is driven through its
pipe; this object runs one private asyncio loop in a daemon thread that owns every DHT call (the
pipe is not thread-safe), the P2P replica (``dht.replicate_p2p()``), the stream handler and the
fetches. The synchronous front submits coroutines to that loop with timeouts; peer data never
raises out of it (SwarmError is raised only for our own failures, e.g. after shutdown).

Hivemind traps handled: values stay tiny (the uvloop pipe crash above ~70 KB never triggers);
``DHT(start=True)`` explicitly; ``startup_timeout`` from config; bootstrap failure is turned
into BootstrapUnreachable with one line; one RPC message is capped at 4 MiB, so bytes move as
≤ 1 MiB frames on a raw stream.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from functools import partial

from hivemind import DHT
from hivemind.p2p import PeerID
from hivemind.utils import get_dht_time

from protocols.records import RolloutRecord
from swarm import wire
from swarm.config import SwarmConfig
from swarm.dht import start_swarm_dht
from swarm.identity import peer_id_of_key, peer_id_of_subkey
from swarm.transport import (
    GatherResult,
    Inbox,
    Limits,
    make_bundle,
    process_announcement,
    rollouts_key,
    settle_fetched,
)

log = logging.getLogger(__name__)
_BACKGROUND_EVERY = 4  # watched rounds no gather is waiting on are polled every 4th tick


class SwarmError(RuntimeError):
    """This node's own transport failed (not a peer's fault), e.g. used after shutdown."""


class HivemindTransport:
    """Transport (swarm.transport.Transport) over a hivemind DHT and libp2p streams."""

    def __init__(self, *, cfg: SwarmConfig, start: bool = True):
        self.cfg = cfg
        self.limits = Limits(cfg.caps.to_caps(), cfg.max_records_per_peer_round, cfg.max_bytes_per_peer_round)
        self.inbox = Inbox()
        self.peer_id = ""
        self.publish_failures = 0  # announcements no DHT node accepted (logged each time)
        self._served: dict[tuple[int, str], bytes] = {}  # (round, sha256) → our bundle bytes
        self._served_lock = threading.Lock()
        self._watched: dict[int, None] = {}  # insertion-ordered set of rounds to poll
        self._waiting: set[int] = set()  # rounds a gather is blocked on right now
        self._stopped = threading.Event()
        self._dht: DHT | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        if start:
            self.start()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._dht, key, self._validator = start_swarm_dht(self.cfg)
        self.peer_id = peer_id_of_key(key)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="swarm-transport", daemon=True)
        self._thread.start()
        try:
            if self._dht.peer_id.to_base58() != self.peer_id:
                raise SwarmError("p2pd peer id differs from the identity key; announcements would not bind to it")
            self._call(self._start_async(), self.cfg.startup_timeout_s)
        except BaseException:
            self.shutdown()  # never leave a DHT process or a p2pd behind
            raise

    async def _start_async(self) -> None:
        self._wake = asyncio.Event()  # bound to this loop
        self._fetch_slots = asyncio.Semaphore(self.cfg.max_concurrent_fetches)
        self._fetches: set[asyncio.Task] = set()
        self._p2p = await self._dht.replicate_p2p()
        await self._p2p.add_binary_stream_handler(wire.HANDLER_NAME, self._handle_stream)
        self._poller = asyncio.create_task(self._poll_forever())

    def _call(self, coro, timeout: float):
        if self._loop is None or self._stopped.is_set():
            coro.close()
            raise SwarmError("transport is not running (never started, or shut down)")
        return asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, timeout), self._loop).result(timeout + 5)

    @property
    def dht(self) -> DHT:
        """The running DHT peer (shared with swarm.averaging; its calls are process-safe, ours go through our loop)."""
        if self._dht is None:
            raise SwarmError("transport is not running (never started)")
        return self._dht

    def visible_maddrs(self) -> list[str]:
        """Full multiaddrs (with /p2p/<id>) other peers can pass as initial_peers."""
        return self._call(self._visible_maddrs(), self.cfg.dht_timeout_s)

    async def _visible_maddrs(self) -> list[str]:
        # through the loop thread: the DHT pipe must have a single writer
        fut = self._dht.run_coroutine(partial(DHT._get_visible_maddrs, latest=False), return_future=True)
        return [str(a) for a in await fut]

    def shutdown(self) -> None:
        """Stop polling and serving, leave the DHT, stop the p2p daemon. Idempotent."""
        if self._stopped.is_set():
            return
        if self._loop is not None:
            try:
                asyncio.run_coroutine_threadsafe(self._stop_async(), self._loop).result(10)
            except Exception as exc:  # shutting down anyway; say what did not stop cleanly
                log.warning("transport shutdown: %r", exc)
        self._stopped.set()
        with self.inbox.cond:
            self.inbox.cond.notify_all()
        if self._dht is not None:
            self._dht.shutdown()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            if not self._thread.is_alive():
                self._loop.close()

    async def _stop_async(self) -> None:
        tasks = [t for t in (getattr(self, "_poller", None), *getattr(self, "_fetches", ())) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        p2p = getattr(self, "_p2p", None)
        if p2p is not None:
            try:
                await p2p.remove_binary_stream_handler(wire.HANDLER_NAME)
            finally:
                await p2p.shutdown()  # a replica: closes our client connection, not the daemon

    # ------------------------------------------------------------------ publish (serve + announce)

    def publish(self, round: int, records: list[RolloutRecord]) -> int:
        data, value, ann = make_bundle(self.peer_id, round, records)
        with self._served_lock:
            self._served[(round, ann.sha256)] = data
            keep = sorted({r for r, _ in self._served})[-self.cfg.serve_rounds:]
            self._served = {k: v for k, v in self._served.items() if k[0] in keep}
        self._watch([round])
        try:
            stored = self._call(self._store(round, value), self.cfg.dht_timeout_s)
        except TimeoutError:
            stored = False
        if not stored:
            self.publish_failures += 1
            log.warning("round %d: no DHT node accepted our announcement; peers will not see this bundle", round)
        return len(data)

    async def _store(self, round_: int, value: bytes) -> bool:
        fut = self._dht.store(rollouts_key(self.cfg.swarm_id, round_), value,
                              expiration_time=get_dht_time() + self.cfg.announce_ttl_s,
                              subkey=self._validator.local_public_key, return_future=True)
        return bool(await fut)

    def _lookup(self, swarm: str, round_: int, sha256: str) -> bytes | None:
        if swarm != self.cfg.swarm_id:
            return None
        with self._served_lock:
            return self._served.get((round_, sha256))

    async def _handle_stream(self, _info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await asyncio.wait_for(wire.serve_bundle(reader, writer, self._lookup), self.cfg.fetch_timeout_s)
        except (asyncio.TimeoutError, ConnectionError, wire.FetchError) as exc:
            log.info("serving a bundle stream failed: %r", exc)
        finally:
            writer.close()

    # ------------------------------------------------------------------ gather (poll, fetch, hand out)

    def _watch(self, rounds: list[int]) -> None:
        with self.inbox.cond:
            for r in rounds:
                self._watched.pop(r, None)
                self._watched[r] = None
            newest = sorted(self._watched)[-self.cfg.watch_rounds:]
            self._watched = {r: None for r in self._watched if r in newest}
            self.inbox.forget_before(min(newest) - self.cfg.watch_rounds)
        if self._loop is not None and not self._stopped.is_set():
            self._loop.call_soon_threadsafe(self._wake.set)

    def gather(self, rounds: list[int], timeout: float, min_peers: int | None) -> GatherResult:
        started = time.monotonic()
        rounds = list(dict.fromkeys(rounds))
        if not rounds:
            return GatherResult([], Counter(), [], None)
        if self._stopped.is_set():
            raise SwarmError("gather on a transport that was shut down")
        self._watch(rounds)
        with self.inbox.cond:
            self._waiting.update(rounds)
        try:
            self.inbox.wait_until(rounds, min_peers, timeout, self.cfg.watch_rounds, self._stopped)
        finally:
            with self.inbox.cond:
                self._waiting.difference_update(rounds)
        return self.inbox.take(rounds, started)

    async def _poll_forever(self) -> None:
        tick = 0
        while True:
            with self.inbox.cond:
                due = [r for r in self._watched if r in self._waiting or tick % _BACKGROUND_EVERY == 0]
            results = await asyncio.gather(*(self._poll_round(r) for r in due), return_exceptions=True)
            for r, res in zip(due, results):
                if isinstance(res, Exception):  # our bug, not a peer's: keep polling, but loudly
                    log.error("polling round %d failed", r, exc_info=res)
            tick += 1
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), self.cfg.poll_interval_s)
            except asyncio.TimeoutError:
                pass

    async def _poll_round(self, round_: int) -> None:
        key = rollouts_key(self.cfg.swarm_id, round_)
        try:
            found = await asyncio.wait_for(self._dht.get(key, latest=True, return_future=True), self.cfg.dht_timeout_s)
        except Exception as exc:  # a DHT hiccup: the next tick retries
            log.info("DHT get %s failed: %r", key, exc)
            return
        if found is None:
            return
        if not isinstance(found.value, dict):
            process_announcement(self.inbox, round_=round_, subkey_peer=None, value=repr(found.value)[:64],
                                 limits=self.limits)
            return
        for subkey, item in found.value.items():
            signer = peer_id_of_subkey(subkey)
            if signer == self.peer_id:
                continue
            ann = process_announcement(self.inbox, round_=round_, subkey_peer=signer,
                                       value=getattr(item, "value", item), limits=self.limits)
            if ann is not None:
                task = asyncio.create_task(self._fetch(ann))
                self._fetches.add(task)
                task.add_done_callback(self._fetches.discard)

    async def _fetch(self, ann) -> None:
        data, reason = None, "fetch_failed"
        async with self._fetch_slots:
            writer = None
            try:
                async def fetch() -> bytes:
                    nonlocal writer
                    _, reader, writer = await self._p2p.call_binary_stream_handler(
                        PeerID.from_base58(ann.peer), wire.HANDLER_NAME)
                    return await wire.fetch_bundle(reader, writer, swarm=self.cfg.swarm_id, round_=ann.round,
                                                   sha256=ann.sha256, nbytes=ann.nbytes)
                data = await asyncio.wait_for(fetch(), self.cfg.fetch_timeout_s)
            except wire.FetchError as exc:
                reason = "digest_mismatch" if exc.reason == "digest_mismatch" else "fetch_failed"
                log.info("fetch of %s round %d: %s", ann.peer[:12], ann.round, exc)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # unreachable peer, daemon error, timeout: counted, never raised
                log.info("fetch of %s round %d failed: %r", ann.peer[:12], ann.round, exc)
            finally:
                if writer is not None:
                    writer.close()
        try:  # decoding is CPU work: off the loop, so serving and polling go on meanwhile
            await asyncio.get_running_loop().run_in_executor(
                None, settle_fetched, self.inbox, ann, data, self.cfg.swarm_id, self.limits, reason)
        except Exception:  # a bug on our side; the bundle still settles, so no gather waits for it
            log.exception("filing the bundle of %s round %d failed", ann.peer[:12], ann.round)
            self.inbox.drop(ann.round, ann.peer, "internal_error")
