"""The in-memory twin of the hivemind transport, for unit tests: same encode/vet/decode path, no network.

`InMemoryHub` stands in for the DHT (one value per signer per key, the newest replacing the older)
plus every peer's served bytes and the direct announcement pushes; tests call it directly to forge
announcements or serve malformed bytes. `InMemoryTransport` runs exactly the receive rules, the
fan-in choice and the peer standing of swarm.exchange.inbox, and reads at most `max_entries_per_key`
entries of a key per poll (a random subset, as the real poll does inside the DHT process), so
what the unit tests prove about them holds for the real transport. Nothing runs in the
background: `take` polls, chooses and fetches in the caller's thread.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

from protocols.codec import sha256_hex
from protocols.keys import rollouts_key, shard_of, window_of, windows_back
from protocols.records import RolloutRecord
from swarm.exchange.polling import pick_entries
from swarm.exchange.transport import Delivery, Inbox, InboxFront, Limits, make_bundle


class InMemoryHub:
    """A stand-in for the DHT, the peers' served bytes and their direct pushes, shared by one test's transports."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._announcements: dict[str, dict[str | None, bytes]] = {}
        self._blobs: dict[tuple[str, str], bytes] = {}
        self._gone: set[str] = set()
        self._listeners: dict[str, InMemoryTransport] = {}

    def announce(self, key: str, signer: str | None, value: bytes) -> None:
        with self._lock:
            self._announcements.setdefault(key, {})[signer] = value

    def serve(self, peer: str, data: bytes) -> None:
        with self._lock:
            self._blobs[(peer, sha256_hex(data))] = data

    def announcements(self, key: str) -> dict[str | None, bytes]:
        with self._lock:
            return dict(self._announcements.get(key, {}))

    def fetch(self, peer: str, sha256: str) -> bytes | None:
        with self._lock:
            return None if peer in self._gone else self._blobs.get((peer, sha256))

    def notify(self, to_peer: str, from_peer: str, value: bytes) -> None:
        """A direct push: the receiver learns the sender's identity from the (authenticated) connection."""
        with self._lock:
            listener = None if to_peer in self._gone else self._listeners.get(to_peer)
        if listener is not None:
            listener.inbox.offer(value, from_peer, now=listener.clock())

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
                 max_entries_per_key: int = 32):
        self.hub, self.peer_id, self.swarm_id = hub, peer_id, swarm_id
        self.limits = limits or Limits()
        self.notify_peers, self.poll_interval_s, self.clock = notify_peers, poll_interval_s, clock
        self.max_entries_per_key = max_entries_per_key
        self.inbox = Inbox(self.limits, clock=clock)
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
        with self.inbox.cond:  # a crowded key keeps peers in good standing first (swarm.exchange.polling.pick_entries)
            prefer, avoid = self.inbox.standing.read_order(now)
        for window in windows_back(window_of(now, lim.window_s), lim.max_age_s, lim.window_s):
            for shard in range(lim.shards):
                entries = list(self.hub.announcements(rollouts_key(self.swarm_id, window, shard)).items())
                entries = pick_entries(entries, self.max_entries_per_key, random, prefer, avoid)
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
        while self.inbox.ready_count() < min_records:
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

    def shutdown(self) -> None:
        self._closed.set()
        self.hub.disconnect(self.peer_id)
