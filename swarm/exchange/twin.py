"""The in-memory twin of the hivemind transport, for unit tests: same encode/vet/decode path, no network.

`InMemoryHub` stands in for the DHT (one value per signer per key, the newest replacing the older)
plus every peer's served bytes and the direct announcement pushes; tests call it directly to forge
announcements or serve malformed bytes. `InMemoryTransport` runs exactly the receive rules, the
fan-in choice and the peer standing of swarm.exchange.inbox, and reads at most `max_entries_per_key`
entries of a key per poll (a random subset, as the real poll does inside the DHT process), so
what the unit tests prove about them holds for the real transport. Nothing runs in the
background: `take` polls, chooses and fetches in the caller's thread. Its side channels are the twins of the
weight channel (swarm.weights.channel.InMemoryWeights) and of the score stream (swarm.exchange.score_stream.MemoryScoreLink);
it has no averager (no DHT).

By rounds (`InMemoryHub(delay_rounds=d)`, the bench's deterministic twin, bench.harness.swarm): the caller
sets `hub.round` before each round, and what a peer announces or pushes in round r becomes visible to every
other peer from round r + d (until then the newest older announcement of that signer is what a read finds);
`take` never waits (nothing can arrive within a round). With a virtual clock and a seeded `rng` for every
transport, every choice is then a function of the rounds alone, and a run reproduces whatever the machine's load.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

from protocols.codec import sha256_hex
from protocols.keys import rollouts_key, shard_of, window_of, windows_back
from protocols.records import RolloutRecord
from swarm.dht.entries import pick_entries
from swarm.exchange.score_stream import MemoryScoreLink
from swarm.exchange.transport import Delivery, Inbox, InboxFront, Limits, make_bundle
from swarm.weights.channel import InMemoryWeights, WeightLimits, weight_hub_of


class InMemoryHub:
    """A stand-in for the DHT, the peers' served bytes and their direct pushes, shared by one test's transports."""

    def __init__(self, delay_rounds: int | None = None) -> None:
        if delay_rounds is not None and delay_rounds < 0:
            raise ValueError(f"delay_rounds must be >= 0, not {delay_rounds}")
        self._lock = threading.Lock()
        self.delay_rounds = delay_rounds  # None: visible at once (by clock); d: from the round r + d on
        self.round = 0  # by rounds: the round being run, set by the caller
        # key → signer → [(round announced, value)], oldest first: the newest one visible is what a read finds
        self._announcements: dict[str, dict[str | None, list[tuple[int, bytes]]]] = {}
        self._pushes: list[tuple[int, str, str, bytes]] = []  # by rounds: (due round, to, from, value)
        self._blobs: dict[tuple[str, str], bytes] = {}
        self._gone: set[str] = set()
        self._listeners: dict[str, InMemoryTransport] = {}

    @property
    def by_rounds(self) -> bool:
        return self.delay_rounds is not None

    def _visible_from(self) -> int:
        """The newest round whose announcements and pushes are visible now."""
        return self.round - (self.delay_rounds or 0)

    def announce(self, key: str, signer: str | None, value: bytes) -> None:
        with self._lock:
            kept = self._announcements.setdefault(key, {}).setdefault(signer, [])
            kept.append((self.round, value))
            visible = [k for k, (r, _) in enumerate(kept) if r <= self._visible_from()]
            del kept[: visible[-1] if visible else 0]  # older than the newest visible: never read again

    def serve(self, peer: str, data: bytes) -> None:
        with self._lock:
            self._blobs[(peer, sha256_hex(data))] = data

    def announcements(self, key: str) -> dict[str | None, bytes]:
        """signer → its newest announcement under `key` visible now."""
        with self._lock:
            horizon = self._visible_from() if self.by_rounds else None
            out = {}
            for signer, kept in self._announcements.get(key, {}).items():
                visible = [v for r, v in kept if horizon is None or r <= horizon]
                if visible:
                    out[signer] = visible[-1]
            return out

    def fetch(self, peer: str, sha256: str) -> bytes | None:
        with self._lock:
            return None if peer in self._gone else self._blobs.get((peer, sha256))

    def notify(self, to_peer: str, from_peer: str, value: bytes) -> None:
        """A direct push: the receiver learns the sender's identity from the (authenticated) connection."""
        with self._lock:
            if self.by_rounds:
                self._pushes.append((self.round + self.delay_rounds, to_peer, from_peer, value))
                return
            listener = None if to_peer in self._gone else self._listeners.get(to_peer)
        if listener is not None:
            listener.inbox.offer(value, from_peer, now=listener.clock())

    def due_pushes(self, to_peer: str) -> list[tuple[str, bytes]]:
        """By rounds: the pushes to `to_peer` due by now, in the order they were made (they leave the hub)."""
        with self._lock:
            due = [p for p in self._pushes if p[1] == to_peer and p[0] <= self.round]
            self._pushes = [p for p in self._pushes if not (p[1] == to_peer and p[0] <= self.round)]
            return [] if to_peer in self._gone else [(frm, value) for _, _, frm, value in due]

    def listen(self, transport: InMemoryTransport) -> None:
        with self._lock:
            self._listeners[transport.peer_id] = transport

    def disconnect(self, peer: str) -> None:
        """The peer is gone: its announcements stay (as in the DHT until expiry), its bytes do not."""
        with self._lock:
            self._gone.add(peer)
            self._listeners.pop(peer, None)


class InMemoryTransport(InboxFront):
    """Transport over an InMemoryHub with the exact encode/vet/choose/decode path of the real one."""

    def __init__(self, hub: InMemoryHub, peer_id: str, swarm_id: str = "rlswarm", limits: Limits | None = None, *,
                 notify_peers: int = 8, poll_interval_s: float = 0.01, clock: Callable[[], float] = time.time,
                 max_entries_per_key: int = 32, rng: random.Random | None = None):
        self.hub, self.peer_id, self.swarm_id = hub, peer_id, swarm_id
        self.limits = limits or Limits()
        self.notify_peers, self.poll_interval_s, self.clock = notify_peers, poll_interval_s, clock
        self.max_entries_per_key = max_entries_per_key
        self.rng = rng or random.Random()  # which entries of a crowded key a poll reads; seeds the inbox's choices
        self.inbox = Inbox(self.limits, rng=random.Random(self.rng.getrandbits(64)), clock=clock)
        self.reads = 0  # announcement entries read from the hub (what a poll costs)
        self._closed = threading.Event()
        hub.listen(self)

    def publish(self, records: list[RolloutRecord]) -> int:
        if self._closed.is_set():
            raise RuntimeError("publish on a transport that was shut down")
        lim = self.limits
        data, value, ann = make_bundle(self.peer_id, records, now=self.clock(), window_s=lim.window_s)
        self.hub.serve(self.peer_id, data)
        self.hub.announce(rollouts_key(self.swarm_id, ann.window, shard_of(self.peer_id, lim.shards)),
                          self.peer_id, value)
        for peer in self.inbox.push_targets(self.notify_peers):
            self.hub.notify(peer, self.peer_id, value)
        return len(data)

    def poll(self) -> None:
        """Read every recent window's announcements, choose within the fan-in budget, fetch."""
        now, lim = self.clock(), self.limits
        for signer, value in self.hub.due_pushes(self.peer_id) if self.hub.by_rounds else ():
            self.inbox.offer(value, signer, now=now)
        with self.inbox.cond:  # a crowded key keeps peers in good standing first (swarm.dht.entries.pick_entries)
            prefer, avoid = self.inbox.standing.read_order(now)
        for window in windows_back(window_of(now, lim.window_s), lim.max_age_s, lim.window_s):
            for shard in range(lim.shards):
                entries = list(self.hub.announcements(rollouts_key(self.swarm_id, window, shard)).items())
                entries = pick_entries(entries, self.max_entries_per_key, self.rng, prefer, avoid)
                self.reads += len(entries)
                for signer, value in entries:
                    if signer != self.peer_id:
                        self.inbox.offer(value, signer, now=now, key_window=window, key_shard=shard)
        for ann in self.inbox.choose(now):
            self.inbox.settle_fetched(ann, self.hub.fetch(ann.peer, ann.sha256), self.swarm_id)

    def _refresh(self) -> None:
        self.poll()  # the twin polls when asked, so peers_seen counts what the hub holds now

    def take(self, min_records: int = 0, timeout: float = 0.0, *, while_earned: bool = False) -> Delivery:
        started = time.monotonic()
        deadline = started + max(0.0, timeout)
        self.poll()
        while self.inbox.ready_count() < min_records and not self.hub.by_rounds:  # by rounds nothing comes in a round
            if while_earned and not self.inbox.awaited():
                break
            if time.monotonic() >= deadline:
                if while_earned:
                    self.inbox.silence()
                break
            time.sleep(max(0.0, min(deadline - time.monotonic(), self.poll_interval_s)))
            self.poll()
        delivery = self.inbox.take(0, 0.0)
        delivery.waited_s = time.monotonic() - started
        return delivery

    # the side channels (swarm.exchange.transport): their in-memory twins, on this transport's hub
    def open_weights(self, follow: list[str], *, fmt: str, limits: WeightLimits, keep: int,
                     **_polling) -> InMemoryWeights:
        """The weight channel's twin (it polls when asked: the real channel's poll and fetch timings do not apply)."""
        return InMemoryWeights(weight_hub_of(self.hub), self.peer_id, self.swarm_id, follow=follow, fmt=fmt,
                               limits=limits, keep=keep)

    def open_score_link(self, *, max_bytes: int, timeout_s: float = 0.0) -> MemoryScoreLink:
        return MemoryScoreLink(self, max_bytes=max_bytes, timeout_s=timeout_s)

    def open_averager(self, tensors: list, **_options) -> None:
        """No DHT, no averager: a federated node on the twin trains alone."""
        return None

    def shutdown(self) -> None:
        self._closed.set()
        self.hub.disconnect(self.peer_id)
