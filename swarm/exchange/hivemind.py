"""The swarm transport on hivemind: windowed, signed DHT announcements, direct pushes, and bundle
bytes over libp2p streams (docs/ARCHITECTURE.md §5, docs/PROTOCOL.md §5–6).

    publish(records):  bundle = encode_bundle(records), kept in memory for max_age_s (bounded in
                       bytes); DHT.store(key=rollouts_key(swarm, window, our shard),
                       subkey="[owner:<our RSA key>]", value=announcement (< 1 KiB, naming
                       our addresses: protocols.addrs), expiration=now + max_age_s or later
                       (swarm.dht.expiry); the same announcement is pushed over
                       swarm.net.wire.NOTIFY_NAME to up to `notify_peers` recently seen peers; in
                       client mode (no listen address) the bundle is offered with its bytes to
                       up to `push_peers` of them instead (swarm.exchange.push, over swarm.net.wire.PUSH_NAME);
                       with cfg.gossip it is also published on its announcement shard's gossipsub topic
                       (swarm.exchange.gossip, swarm.exchange.shards)
    background poller: every poll_interval_s it reads the current window's shards (the previous
                       window's every 4th tick, on start the windows of the last max_age_s, a
                       crowded key less often: swarm.exchange.polling); every (subkey, value) goes through the shared
                       receive rules (swarm.exchange.inbox), and the fan-in choice decides what to fetch
                       over swarm.net.wire.HANDLER_NAME (swarm.exchange.fetch; dialled at the announced
                       addresses first, then by libp2p's routing: swarm.net.dial)
    take(min, T):      the records delivered since the last call (waits ≤ T, only while fewer
                       than `min` are ready); judge(): the node's verdict (swarm.exchange.standing)
    handlers:          bundle pulls, notifications, pushed bundles (swarm.exchange.push), and our swarm id,
                       protocol version and clock for `swarm doctor` (swarm.net.wire.INFO_NAME)
    side channels:     open_weights (swarm.weights.hivemind), open_score_link (swarm.exchange.score_stream),
                       open_averager (swarm.weights.averaging): on this peer, its loop and its DHT

One RSA key (swarm.net.identity) is both the libp2p identity and the DHT signing key, so the peer id
a receiver derives from the signed subkey is the peer it dials for the bytes (a connection at an
announced address is to that peer, or libp2p refuses it), and the `peer` field of every record
must equal it; a push is attributed to the stream's authenticated peer.

Threads and processes: hivemind's DHT runs in a child process (fork) driven through its pipe;
this object runs one private asyncio loop in a daemon thread that owns every DHT call (the pipe
is not thread-safe), the P2P replica (`dht.replicate_p2p()`), the stream handlers and the
fetches. The synchronous front submits coroutines to that loop with timeouts; peer data never
raises out of it (SwarmError is raised only for our own failures, e.g. after shutdown).

Hivemind traps handled: a DHT read runs inside the DHT process (`swarm.dht.peer.read_keys`), which maps
each signed subkey to its peer id and returns at most `max_entries_per_key` entries per key, so
what crosses the pipe stays far below the ~70 KB at which hivemind's uvloop pipe breaks; one
RPC message is capped at 4 MiB, so bytes move as ≤ 1 MiB frames on a raw stream.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random
import threading
import time
from collections import Counter, OrderedDict
from functools import partial

from hivemind import DHT

from protocols.addrs import encode_addrs
from protocols.keys import rollouts_key, shard_of
from protocols.records import Announcement, RolloutRecord
from swarm.config import SwarmConfig
from swarm.dht.expiry import Expirations
from swarm.dht.peer import start_swarm_dht
from swarm.exchange.admission import DownloadSlots
from swarm.exchange.fetch import BUSY_TRIES, fetch_announced
from swarm.exchange.gossip import GossipAnnouncements, GossipReport, start_gossip
from swarm.exchange.handlers import StreamHandlers
from swarm.exchange.loop import cancel_all_but_me, quiet_late_streams
from swarm.exchange.poller import PollGate, poll_forever, poll_once
from swarm.exchange.polling import PollPlan
from swarm.exchange.push import Pusher
from swarm.exchange.score_stream import HivemindScoreLink
from swarm.exchange.transport import Delivery, Inbox, InboxFront, Limits, make_bundle
from swarm.net import wire
from swarm.net.dial import DialPolicy, FetchErrors, open_stream
from swarm.net.identity import peer_id_of_key
from swarm.weights.channel import WeightLimits
from swarm.weights.hivemind import HivemindWeights

log = logging.getLogger(__name__)


ANNOUNCE_ATTEMPTS = 3  # DHT stores of one announcement, while its window is current
ANNOUNCE_RETRY_S = 0.5  # pause between them


class SwarmError(RuntimeError):
    """This node's own transport failed (not a peer's fault), e.g. used after shutdown."""


class HivemindTransport(StreamHandlers, InboxFront):
    """Transport (swarm.exchange.transport.Transport) over a hivemind DHT and libp2p streams."""

    def __init__(self, *, cfg: SwarmConfig, start: bool = True):
        self.cfg = cfg
        self.limits = Limits.of(cfg)
        self.inbox = Inbox(self.limits)
        self.peer_id = ""
        self.publish_failures = 0  # announcements no DHT node accepted (logged each time)
        self.addrs = ""  # our dial hint in every announcement (protocols.addrs); "" in client mode
        self.fetch_errors = FetchErrors()  # peer → why its last fetch failed (`swarm doctor`)
        self.busy_answers = 0  # fetches a busy publisher asked us to try again later (and we did)
        self.pusher = Pusher(push_peers=cfg.push_peers, timeout_s=cfg.fetch_timeout_s) if cfg.client_mode else None
        self.gossip: GossipAnnouncements | None = None  # with cfg.gossip (swarm.exchange.gossip)
        self.gossip_fallback: str | None = None  # why gossip is on but not running (DHT alone then)
        self._gossip_report = GossipReport()
        self.poll_gate = PollGate(cfg.gossip_poll_every, cfg.gossip_quiet_polls, cfg.poll_interval_s)
        self._served: OrderedDict[str, tuple[bytes, float]] = OrderedDict()  # sha256 → (bundle, created_at)
        self._served_lock = threading.Lock()
        self._announcing: set = set()  # announcements whose DHT store is still running (concurrent futures)
        self._expirations = Expirations()  # every store of ours under a key expires later than the last one
        self.clock = time.time  # our clock for what we publish (tests skew it)
        self._stopped = threading.Event()
        self._refused_before: Counter = Counter()  # refusals already handed out by take()
        self._dht: DHT | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        if start:
            self.start()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._dht, key, self._validator = start_swarm_dht(self.cfg)
        self.peer_id = peer_id_of_key(key)
        self._shard = shard_of(self.peer_id, self.cfg.shards)
        self._plan = PollPlan(self.cfg, time.time())  # which keys each poll reads (swarm.exchange.polling)
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(quiet_late_streams)
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
        # downloads (pulls and pushes together), strangers on at most half of them (swarm.exchange.admission)
        self._slots = DownloadSlots(self.cfg.max_concurrent_fetches, self.inbox.is_good)
        self._tasks: set[asyncio.Task] = set()
        self._p2p = await self._dht.replicate_p2p()
        visible = [] if self.cfg.client_mode else [str(a) for a in await self._p2p.get_visible_maddrs()]
        if not self.cfg.client_mode:  # a client-mode p2pd has no address to name
            self.addrs = encode_addrs(visible)
        # which announced addresses we dial: those of our own network's scopes, rate-limited (swarm.net.dial)
        self.dials = DialPolicy([*visible, *self.cfg.announce_maddrs], self.cfg.initial_peers)
        await self._add_handlers()  # swarm.exchange.handlers
        if self.cfg.gossip:  # or the DHT alone, said once, when pubsub is unavailable (swarm.exchange.gossip)
            self.gossip, self.gossip_fallback = await start_gossip(self)
        self._poller = asyncio.create_task(poll_forever(self))

    def _call(self, coro, timeout: float):
        if self._loop is None or self._stopped.is_set():
            coro.close()
            raise SwarmError("transport is not running (never started, or shut down)")
        return asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, timeout), self._loop).result(timeout + 5)

    def _spawn(self, coro) -> asyncio.Task:
        """Run `coro` on the loop in the background; the task set keeps it referenced until done."""
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def run_on_loop(self, coro, timeout: float):
        """Run `coro` on the transport's loop, where its DHT calls and p2p live, and return its result
        (extensions on the same peer: swarm.weights.hivemind)."""
        return self._call(coro, timeout)

    def submit(self, coro) -> concurrent.futures.Future:
        """Start `coro` on the loop from another thread; its result arrives in the returned Future (a stopped
        transport: SwarmError at once)."""
        if self._loop is None or self._stopped.is_set():
            coro.close()
            raise SwarmError("transport is not running (never started, or shut down)")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def spawn(self, coro) -> asyncio.Task:
        """Start background work on the loop (call it there); it is cancelled at shutdown."""
        return self._spawn(coro)

    @property
    def p2p(self):
        """The p2p replica streams are opened and served on (set once started)."""
        return self._p2p

    @property
    def signing_subkey(self) -> bytes:
        """The DHT subkey our signed values are stored under: [owner:<our RSA public key>]."""
        return self._validator.local_public_key

    @property
    def dht(self) -> DHT:
        """The running DHT peer (shared with swarm.weights.averaging; its calls are process-safe, ours go through our loop)."""
        if self._dht is None:
            raise SwarmError("transport is not running (never started)")
        return self._dht

    # ------------------------------------------------------------------ side channels (Transport), on this peer

    def open_weights(self, follow: list[str], *, fmt: str, limits: WeightLimits, keep: int, poll_interval_s: float,
                     fetch_timeout_s: float, ttl_s: float) -> HivemindWeights:
        return HivemindWeights(self, follow=follow, fmt=fmt, limits=limits, poll_interval_s=poll_interval_s,
                               fetch_timeout_s=fetch_timeout_s, ttl_s=ttl_s, keep=keep)

    def open_score_link(self, *, max_bytes: int, timeout_s: float) -> HivemindScoreLink:
        return HivemindScoreLink(self, max_bytes=max_bytes, timeout_s=timeout_s)

    def open_averager(self, tensors: list, **options):
        """An AdapterAverager (swarm.weights.averaging: torch, imported only here) on our DHT."""
        from swarm.weights.averaging import AdapterAverager

        return AdapterAverager(tensors, self.dht, **options)

    def visible_maddrs(self) -> list[str]:
        """Full multiaddrs (with /p2p/<id>) other peers can pass as initial_peers."""
        return self._call(self._visible_maddrs(), self.cfg.dht_timeout_s)

    async def _visible_maddrs(self) -> list[str]:
        # through the loop thread: the DHT pipe must have a single writer
        fut = self._dht.run_coroutine(partial(DHT._get_visible_maddrs, latest=False), return_future=True)
        return [str(a) for a in await fut]

    STOP_TIMEOUT_S = 10.0  # for our stop coroutine; what is still running after it is cancelled

    def shutdown(self) -> None:
        """Stop polling and serving, leave the DHT, stop the p2p daemon. Idempotent.

        The loop is closed only once nothing runs on it: a stop that overran its timeout (a throttled
        or starved process) is cancelled with every task left, and they get 5 s to finish; closing the
        loop under pending tasks made their StreamWriters raise "Event loop is closed" when collected."""
        if self._stopped.is_set():
            return
        self.flush()  # our last bundles' announcements, bounded by dht_timeout_s
        if self._loop is not None:
            stop = asyncio.run_coroutine_threadsafe(self._stop_async(), self._loop)
            try:
                stop.result(self.STOP_TIMEOUT_S)
            except concurrent.futures.TimeoutError:
                stop.cancel()
                log.warning("transport shutdown: stopping took over %g s; cancelling what is left", self.STOP_TIMEOUT_S)
            except Exception as exc:  # shutting down anyway; say what did not stop cleanly
                log.warning("transport shutdown: %r", exc)
        self._stopped.set()
        with self.inbox.cond:
            self.inbox.cond.notify_all()
        if self._dht is not None:
            self._dht.shutdown()
        if self._loop is not None:
            pending = 0
            try:
                pending = asyncio.run_coroutine_threadsafe(cancel_all_but_me(5.0), self._loop).result(10)
            except Exception as exc:
                log.debug("transport shutdown: cancelling the loop's tasks: %r", exc)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            if self._thread.is_alive() or pending:
                log.debug("transport shutdown: loop left open (%d tasks would not stop)", pending)
            else:
                self._loop.close()

    async def _stop_async(self) -> None:
        tasks = [t for t in (getattr(self, "_poller", None), *getattr(self, "_tasks", ())) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        p2p = getattr(self, "_p2p", None)
        if p2p is not None:
            try:
                await p2p.remove_binary_stream_handler(wire.HANDLER_NAME)
                await p2p.remove_binary_stream_handler(wire.NOTIFY_NAME)
                await p2p.remove_binary_stream_handler(wire.PUSH_NAME)
                await p2p.remove_binary_stream_handler(wire.INFO_NAME)
            finally:
                await p2p.shutdown()  # a replica: closes our client connection, not the daemon

    # ------------------------------------------------------------------ publish (serve, announce, push)

    def publish(self, records: list[RolloutRecord]) -> int:
        """Serve the bundle and start announcing it; returns its wire size without waiting for the DHT.

        The DHT store runs on the transport's loop in the background (the DHT nodes nearest the key may be
        slow peers, and a round must not be paced by them); one no DHT node accepted is counted
        (publish_failures) and logged."""
        data, value, ann = make_bundle(self.peer_id, records, now=self.clock(), window_s=self.cfg.window_s,
                                       addrs=self.addrs, level=self.gossip.level if self.gossip is not None else -1)
        self._serve(ann, data)
        if self._loop is None or self._stopped.is_set():
            raise SwarmError("transport is not running (never started, or shut down)")
        pending = asyncio.run_coroutine_threadsafe(self._announce_counted(ann, value), self._loop)
        self._announcing.add(pending)
        pending.add_done_callback(self._announcing.discard)
        return len(data)

    async def _announce_counted(self, ann: Announcement, value: bytes) -> None:
        """Push once; store in the DHT, tried again while the window is current (a busy machine's store may time out)."""
        for attempt in range(ANNOUNCE_ATTEMPTS):
            try:
                stored = await asyncio.wait_for(self._announce(ann, value, push=attempt == 0), self.cfg.dht_timeout_s)
            except Exception as exc:  # timeout or DHT error (not CancelledError, a BaseException): a refusal
                log.info("announcing our bundle failed (try %d): %r", attempt + 1, exc)
                stored = False
            if stored or time.time() - ann.created_at + ANNOUNCE_RETRY_S > self.cfg.window_s:
                break
            await asyncio.sleep(ANNOUNCE_RETRY_S)
        if not stored:
            self.publish_failures += 1
            log.warning("no DHT node accepted our announcement; only notified peers will see this bundle")

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every announcement started so far has been stored or has failed (tests, shutdown)."""
        for pending in list(self._announcing):
            try:
                pending.result(timeout if timeout is not None else ANNOUNCE_ATTEMPTS * (self.cfg.dht_timeout_s + ANNOUNCE_RETRY_S) + 5)
            except Exception:  # cancelled at shutdown, or already counted
                pass

    def _serve(self, ann: Announcement, data: bytes) -> None:
        """Keep our bundle for max_age_s, within serve_max_bytes (oldest out first)."""
        with self._served_lock:
            self._served[ann.sha256] = (data, ann.created_at)
            horizon = time.time() - self.cfg.max_age_s
            total = sum(len(d) for d, _ in self._served.values())
            while self._served:
                sha, (old, created) = next(iter(self._served.items()))
                if created >= horizon and total <= self.cfg.serve_max_bytes:
                    break
                total -= len(old)
                del self._served[sha]

    async def _announce(self, ann: Announcement, value: bytes, push: bool = True) -> bool:
        if self.pusher is not None:  # client mode: nobody can dial us, so offer the bytes themselves
            data = self._lookup(self.cfg.swarm_id, ann.sha256)
            peers = self.pusher.targets(self.inbox.push_targets(self.cfg.push_peers), time.time())
            if data is not None and push:
                self._spawn(self.pusher.offer_all(self._p2p, peers, value, data, self.inbox.addrs_of, self.dials))
            return True
        for peer in self.inbox.push_targets(self.cfg.notify_peers) if push else ():
            self._spawn(wire.notify(self.open_stream, peer, wire.NOTIFY_NAME, value, self.cfg.fetch_timeout_s))
        if self.gossip is not None and push:
            self._spawn(self.gossip.publish(value))
        key = rollouts_key(self.cfg.swarm_id, ann.window, self._shard)
        expiration = self._expirations.next(key, ann.created_at + self.cfg.max_age_s)  # newest wins (swarm.dht.expiry)
        fut = self._dht.store(key, value, expiration_time=expiration, subkey=self._validator.local_public_key,
                              return_future=True)
        return bool(await fut)

    def _lookup(self, swarm: str, sha256: str) -> bytes | None:
        if swarm != self.cfg.swarm_id:
            return None
        with self._served_lock:
            found = self._served.get(sha256)
        return found[0] if found and found[1] >= time.time() - self.cfg.max_age_s else None

    async def open_stream(self, peer: str, protocol: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A `protocol` stream to `peer`, through the addresses of its newest announcement first, as far as our
        dial policy allows (swarm.net.dial)."""
        return await open_stream(self._p2p, peer, protocol, self.inbox.addrs_of(peer), self.dials)

    # ------------------------------------------------------------------ take (poll, choose, fetch)

    def take(self, min_records: int = 0, timeout: float = 0.0, *, while_earned: bool = False) -> Delivery:
        if self._stopped.is_set():
            raise SwarmError("take on a transport that was shut down")
        delivery = self.inbox.take(min_records, timeout, self._stopped, while_earned=while_earned)
        delivery.refused = self._refused_since_last_take()
        delivery.announce = self._gossip_report.since_last(self)
        return delivery

    def _refused_since_last_take(self) -> Counter:
        """Streams refused, bundles declined and addresses not dialled since the previous take (Delivery.refused)."""
        total = Counter(self.refused_streams())
        total.update({f"dial:{k}": v for k, v in self.dials.stats.items() if k != "dialled"})
        new = total - self._refused_before
        self._refused_before = total
        return new

    async def _poll_once(self, tick: int) -> None:
        await poll_once(self, tick)  # swarm.exchange.poller

    def _fetch_chosen(self) -> None:
        """Start fetching what the fan-in choice picks now (on the loop)."""
        for ann in self.inbox.choose(time.time()):
            self._spawn(self._fetch(ann))

    async def _fetch(self, ann: Announcement) -> None:
        # peers not in good standing share half the download slots, so they cannot hold every one, and one pull of a
        # peer at a time (swarm.exchange.admission); a busy publisher is asked again after its retry_after, 1–2×
        # (receivers spread out), at most BUSY_TRIES times in all, the slot kept meanwhile (so this pull goes before
        # the peer's next ones), and it is never counted failed for it
        async with self._slots.hold(ann.peer):
            for attempt in range(BUSY_TRIES):
                data, reason, error, retry_s = await fetch_announced(
                    self._p2p, ann, swarm_id=self.cfg.swarm_id, timeout_s=self.cfg.fetch_timeout_s, policy=self.dials)
                if reason != "busy" or attempt == BUSY_TRIES - 1:
                    break
                self.busy_answers += 1
                await asyncio.sleep(retry_s * random.uniform(1.0, 2.0))
        if data is None and reason != "busy":
            self.fetch_errors.failed(ann.peer, error)
        elif data is not None:
            self.fetch_errors.succeeded(ann.peer)
        try:  # decoding is CPU work: off the loop, so serving and polling go on meanwhile
            await asyncio.get_running_loop().run_in_executor(
                None, self.inbox.settle_fetched, ann, data, self.cfg.swarm_id, reason or "fetch_failed")
        except Exception:  # a bug on our side; the bundle still counts, so nothing waits for it
            log.exception("filing the bundle of %s failed", ann.peer[:12])
            self.inbox.drop("internal_error")
