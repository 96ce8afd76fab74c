"""The in-memory twin of the hivemind transport, for unit tests: same encode/vet/decode path, no network.

`InMemoryHub` stands in for the DHT plus every peer's served bytes; tests call it directly to
forge announcements or serve malformed bytes. `InMemoryTransport` runs exactly the receive rules
of swarm.transport, so what the unit tests prove about them holds for the real transport.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

from protocols.codec import DEFAULT_CAPS, Caps, sha256_hex
from protocols.records import RolloutRecord
from swarm.transport import (
    GatherResult,
    Inbox,
    Limits,
    make_bundle,
    process_announcement,
    rollouts_key,
    settle_fetched,
)


class InMemoryHub:
    """A stand-in for the DHT plus the peers' served bytes, shared by InMemoryTransports of one test.

    ``announce`` takes the *signer* explicitly (the DHT proves it with a signature); tests call it
    directly to forge announcements or serve malformed bytes.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._announcements: dict[str, dict[str | None, bytes]] = {}
        self._blobs: dict[tuple[str, str], bytes] = {}
        self._gone: set[str] = set()

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

    def disconnect(self, peer: str) -> None:
        """The peer is gone: its announcements stay (as in the DHT until expiry), its bytes do not."""
        with self._lock:
            self._gone.add(peer)


class InMemoryTransport:
    """Transport over an InMemoryHub with the exact encode/vet/decode path of the real one."""

    def __init__(self, hub: InMemoryHub, peer_id: str, swarm_id: str = "rlswarm", caps: Caps = DEFAULT_CAPS, *,
                 max_records_per_peer_round: int = 256, max_bytes_per_peer_round: int = 16 << 20,
                 watch_rounds: int = 8, poll_interval_s: float = 0.01):
        self.hub, self.peer_id, self.swarm_id = hub, peer_id, swarm_id
        self.limits = Limits(caps, max_records_per_peer_round, max_bytes_per_peer_round)
        self.watch_rounds, self.poll_interval_s = watch_rounds, poll_interval_s
        self.inbox = Inbox()
        self._closed = threading.Event()

    def publish(self, round: int, records: list[RolloutRecord]) -> int:
        if self._closed.is_set():
            raise RuntimeError("publish on a transport that was shut down")
        data, value, _ = make_bundle(self.peer_id, round, records)
        self.hub.serve(self.peer_id, data)
        self.hub.announce(rollouts_key(self.swarm_id, round), self.peer_id, value)
        return len(data)

    def _poll(self, rounds: list[int]) -> None:
        for r in rounds:
            for signer, value in self.hub.announcements(rollouts_key(self.swarm_id, r)).items():
                if signer == self.peer_id:
                    continue
                ann = process_announcement(self.inbox, round_=r, subkey_peer=signer, value=value, limits=self.limits)
                if ann is not None:
                    settle_fetched(self.inbox, ann, self.hub.fetch(ann.peer, ann.sha256), self.swarm_id, self.limits)

    def gather(self, rounds: list[int], timeout: float, min_peers: int | None) -> GatherResult:
        started = time.monotonic()
        rounds = list(rounds)
        if not rounds:
            return GatherResult([], Counter(), [], None)
        deadline = started + max(0.0, timeout)
        while True:
            self._poll(rounds)
            left = deadline - time.monotonic()
            if left <= 0 or self.inbox.enough(rounds, min_peers, self.watch_rounds):
                break
            time.sleep(min(left, self.poll_interval_s))
        return self.inbox.take(rounds, started)

    def shutdown(self) -> None:
        self._closed.set()
        self.hub.disconnect(self.peer_id)
