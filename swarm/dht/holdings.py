"""What a node's DHT process holds for other peers, bounded (docs/PROTOCOL.md §5): per record, per sender, in all.

hivemind's DHT peer stores whatever it is sent, under any key, for as long as the sender asks. Measured over real
peers on 127.0.0.1 (docs/BENCHMARKS.md §15I): one peer had a node hold 20 values of 1 MiB under keys of no one's,
expiring a year later, in 4 s (the sender budget of swarm.dht.budget counts items, not bytes); and signed
announcements of throwaway identities, each a valid entry, cost the node's DHT process ≈ 11 KB of memory apiece
for max_age_s — up to 38,400 of them in 600 s from one sender within its budget. So the store handler here, in
front of hivemind's, admits a record (a value, or one subkey's entry of a dictionary) only when

  - its value is at most MAX_VALUE_BYTES (an announcement is < 1 KiB) — else `too_big`;
  - its expiration is at most MAX_AHEAD_S ahead (a learner's weight announcement lives up to 7 days) — `too_far`;
  - everything held for others then stays within `max_bytes` (`swarm.dht_max_held_mib`) — else `full`;
  - its sender (the stream's peer id) then holds at most `share` of `max_bytes` — `sender_full`.

A record is charged its key, subkey and value bytes plus RECORD_COST (hivemind's own books of a record: its heap
entries and wrappers), from admission until its expiration; a record that replaces one under the same key and
subkey is charged the larger of the two, until the later expiration (so a smaller value with an earlier expiration,
which hivemind refuses, frees nothing). A refused item is answered as refused and never reaches hivemind; a
dictionary item is admitted whole or not at all. Refusals are counted by reason and logged now and then. What the
node stores itself (its own announcements, and what its reads find) is not a peer's and is not charged; the local
cache of what its reads find is off (swarm.dht.peer: every read of ours asks for the latest value, which a cached
copy never is, and a hostile replica could have filled it with answers of its choosing).
`install(max_bytes)` patches hivemind's DHTProtocol in the DHT process only (swarm.dht.peer.QuietOrphanDHT.run).
"""

from __future__ import annotations

import heapq
import logging
import time
from collections import Counter

from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.storage import DictionaryDHTValue
from hivemind.p2p import P2PContext
from hivemind.proto import dht_pb2
from hivemind.utils.serializer import MSGPackSerializer

log = logging.getLogger(__name__)
MAX_VALUE_BYTES = 4096
MAX_DICTIONARY_BYTES = 256 * 1024  # a dictionary item longer than this is refused unread (too_big)
MAX_AHEAD_S = 8 * 86400.0
RECORD_COST = 2048  # bytes charged per record beyond its key, subkey and value: hivemind's wrappers and books of it
STORE_COST = 256  # bytes charged per admitted store until its expiration: the heap entry hivemind keeps that long
SENDER_SHARE = 1 / 8  # of max_bytes, for one sender


class Holdings:
    """The books of what each sender has us hold (module docstring); `clock` is DHT time (unix seconds)."""

    def __init__(self, max_bytes: int, share: float = SENDER_SHARE, clock=time.time):
        self.max_bytes, self.per_sender, self.clock = max_bytes, max(1, int(share * max_bytes)), clock
        self._held: dict[tuple[bytes, bytes], tuple[str, int, float]] = {}  # (key, subkey) → (sender, cost, expiry)
        self._heap: list[tuple[float, int, tuple[bytes, bytes], str]] = []  # each store: (expiry, seq, slot, sender)
        self._seq = 0
        self._by_sender: Counter = Counter()
        self.total = 0
        self.refused: Counter = Counter()  # records refused, by reason
        self._logged = 0.0

    def _charge(self, sender: str, cost: int) -> None:
        self.total += cost
        self._by_sender[sender] += cost
        if self._by_sender[sender] <= 0:
            del self._by_sender[sender]

    def _expire(self, now: float) -> None:
        while self._heap and self._heap[0][0] <= now:
            _, _, slot, sender = heapq.heappop(self._heap)
            self._charge(sender, -STORE_COST)
            held = self._held.get(slot)
            if held is not None and held[2] <= now:
                del self._held[slot]
                self._charge(held[0], -held[1])

    def admit(self, sender: str, records: list[tuple[bytes, bytes, int, float]]) -> str | None:
        """Hold `records` [(key, subkey, value bytes, expiration)] for `sender`, all or none: None, or why not."""
        now = self.clock()
        self._expire(now)
        reason = None
        for _, _, size, expiration in records:
            if size > MAX_VALUE_BYTES:
                reason = "too_big"
            elif expiration > now + MAX_AHEAD_S:
                reason = reason or "too_far"
        planned, mine, total = [], 0, 0
        if reason is None:
            for key, subkey, size, expiration in records:
                slot, cost = (key, subkey), len(key) + len(subkey) + size + RECORD_COST
                old, until = self._held.get(slot), expiration
                if old is not None:  # the larger charge, until the later expiration
                    cost, until = max(cost, old[1]), max(expiration, old[2])
                    total -= old[1]
                    mine -= old[1] if old[0] == sender else 0
                planned.append((slot, cost, until, expiration))
                total += cost + STORE_COST
                mine += cost + STORE_COST
            if self.total + total > self.max_bytes:
                reason = "full"
            elif self._by_sender[sender] + mine > self.per_sender:
                reason = "sender_full"
        if reason is not None:
            self.refused[reason] += len(records)
            if now - self._logged > 60:
                self._logged = now
                log.info("DHT records refused so far (what we hold for other peers is bounded): %s; held %.1f MiB",
                         dict(self.refused), self.total / 2**20)
            return reason
        for slot, cost, until, expiration in planned:
            old = self._held.pop(slot, None)
            if old is not None:
                self._charge(old[0], -old[1])
            self._held[slot] = (sender, cost, until)
            self._charge(sender, cost + STORE_COST)
            self._seq += 1
            heapq.heappush(self._heap, (until if old is not None else expiration, self._seq, slot, sender))
        return None

    def held_by(self, sender: str) -> int:
        return self._by_sender.get(sender, 0)

    def stats(self) -> dict:
        """What is held and refused so far (the largest holders, by the last 12 characters of their peer id)."""
        top = sorted(self._by_sender.items(), key=lambda kv: -kv[1])[:4]
        return {"held_bytes": self.total, "records": len(self._held), "senders": len(self._by_sender),
                "refused": dict(self.refused), "top_senders": {k[-12:]: v for k, v in top}}


def _records(key: bytes, tag: bytes, value: bytes, expiration: float) -> list[tuple[bytes, bytes, int, float]] | None:
    """The records one store item asks us to hold; None when a dictionary item does not decode."""
    if tag != DHTProtocol.IS_DICTIONARY:
        return [(key, tag, len(value), expiration)]
    if len(value) > MAX_DICTIONARY_BYTES:  # refused unread
        return [(key, tag, len(value), expiration)]
    try:
        dictionary = MSGPackSerializer.loads(value)
    except Exception:
        return None
    if not isinstance(dictionary, DictionaryDHTValue):
        return None
    return [(key, MSGPackSerializer.dumps(sub), len(item.value), item.expiration_time)
            for sub, item in dictionary.items()] or [(key, tag, len(value), expiration)]


holdings: Holdings | None = None  # this process's, once installed


def install(max_bytes: int) -> Holdings:
    """Put a Holdings of `max_bytes` in front of hivemind's DHT store handler (in this process; idempotent)."""
    global holdings
    store = DHTProtocol.rpc_store
    if getattr(store, "holds", False):
        return holdings
    holdings = books = Holdings(max_bytes)

    async def rpc_store(self, request: dht_pb2.StoreRequest, context: P2PContext) -> dht_pb2.StoreResponse:
        sender = context.remote_id.to_base58()
        items = list(zip(request.keys, request.subkeys, request.values, request.expiration_time, request.in_cache))
        admitted = []
        for key, tag, value, expiration, in_cache in items:
            records = _records(key + (b"\x01" if in_cache else b""), tag, value, expiration)  # cache: slots of its own
            admitted.append(records is not None and books.admit(sender, records) is None)
        if all(admitted):
            return await store(self, request, context)
        kept = [item for item, ok in zip(items, admitted) if ok]
        answer = iter([])
        if kept:
            keys, subkeys, values, expirations, in_cache = map(list, zip(*kept))
            inner = dht_pb2.StoreRequest(keys=keys, subkeys=subkeys, values=values, expiration_time=expirations,
                                         in_cache=in_cache, peer=request.peer)
            answer = iter((await store(self, inner, context)).store_ok)
        return dht_pb2.StoreResponse(store_ok=[next(answer) if ok else False for ok in admitted], peer=self.node_info)

    rpc_store.holds = True
    DHTProtocol.rpc_store = rpc_store
    return books
