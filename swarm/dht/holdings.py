"""What a node's DHT process holds for other peers, bounded (docs/PROTOCOL.md §5): per record, per sender, in all.

hivemind's DHT peer stores whatever it is sent, under any key, for as long as the sender asks. Measured over real
peers on 127.0.0.1 (docs/benchmarks/reliability.md §15I): one peer had a node hold 20 values of 1 MiB under keys of no one's,
expiring a year later, in 4 s (the sender budget of swarm.dht.budget counts items, not bytes); and signed
announcements of throwaway identities, each a valid entry, cost the node's DHT process ≈ 11 KB of memory apiece
for max_age_s — up to 38,400 of them in 600 s from one sender within its budget. So the store handler here, in
front of hivemind's, admits a record (a value, or one subkey's entry of a dictionary) only when

  - its value is at most MAX_VALUE_BYTES (an announcement is < 1 KiB) — else `too_big`;
  - its expiration is at most MAX_AHEAD_S ahead (a learner's weight announcement lives up to 7 days) — `too_far`;
  - everything held for others then stays within `max_bytes` (`swarm.dht_max_held_mib`) — else `full`;
  - its sender (the stream's peer id) then holds at most `share` of `max_bytes` — `sender_full`.

The books follow what hivemind's storage keeps. A record no newer than the copy held under its key and subkey
(hivemind keeps the copy it has), or already expired, is answered as refused without reaching hivemind and costs
nothing (counted in `not_stored`: `not_newer`, `expired`) — so a peer that hands us entries we already hold
(hivemind hands a peer it has just met the entries that peer should store, DHTProtocol.update_routing_table) is
not charged for them; a dictionary item goes on with its newer entries only. After hivemind's store, a record is
charged to its sender only if storage holds that copy: its key, subkey and value bytes plus RECORD_COST (hivemind's
own books of a record), until it expires or storage no longer holds it (a newer copy replaced it: the replaced
copy's charge is released, the new one charged to its sender; a value under the key replaced the dictionary), and
STORE_COST for the store (the heap entry hivemind keeps) until the store's expiration. A record is never charged
to the owner its entry names (that would let any peer fill its victims' shares). A refused item is answered as
refused and never reaches hivemind; a dictionary item is admitted whole or not at all. Refusals are counted by
reason and logged now and then. What the node stores itself (its own announcements, and what its reads find) is
not a peer's and is not charged; the local cache of what its reads find is off (swarm.dht.peer: every read of ours
asks for the latest value, which a cached copy never is, and a hostile replica could have filled it).
`install(max_bytes)` patches hivemind's DHTProtocol in the DHT process only (swarm.dht.peer.QuietOrphanDHT.run).
"""

from __future__ import annotations

import heapq
import logging
import time
from collections import Counter
from typing import Callable, NamedTuple

from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.routing import DHTID
from hivemind.dht.storage import DHTLocalStorage, DictionaryDHTValue
from hivemind.p2p import P2PContext
from hivemind.proto import dht_pb2
from hivemind.utils.serializer import MSGPackSerializer

log = logging.getLogger(__name__)
MAX_VALUE_BYTES = 4096
MAX_DICTIONARY_BYTES = 256 * 1024  # a dictionary item longer than this is refused unread (too_big)
MAX_AHEAD_S = 8 * 86400.0
RECORD_COST = 2048  # bytes charged per record beyond its key, subkey and value: hivemind's wrappers and books of it
STORE_COST = 256  # bytes charged per stored copy until its expiration: the heap entry hivemind keeps that long
SENDER_SHARE = 1 / 8  # of max_bytes, for one sender
PLAIN = object()  # the `sub` of a record that is a value, not a dictionary's entry


class Record(NamedTuple):
    """One record a store item asks us to hold: a value (sub PLAIN) or one entry of a dictionary (sub: its subkey)."""

    key: bytes
    tag: bytes  # the subkey as sent (msgpack); for a value, hivemind's IS_REGULAR_VALUE
    size: int  # value bytes
    expiration: float
    cache: bool = False  # for hivemind's cache storage (slots of their own), not its storage
    sub: object = PLAIN

    @property
    def slot(self) -> tuple[bytes, bytes, bool]:
        return self.key, self.tag, self.cache

    @property
    def cost(self) -> int:
        return len(self.key) + len(self.tag) + self.size + RECORD_COST


Held = Callable[[Record], "float | None"]  # the expiration of the copy storage holds in a record's slot, or None


def _nothing_held(_record: Record) -> None:
    return None


def held_in(storage: DHTLocalStorage, record: Record) -> float | None:
    """The expiration of the copy hivemind's `storage` holds where `record` would go (what a store of it is compared
    with: a value with the key's, a dictionary's entry with that entry's, or with a value held under its key)."""
    held = storage.data.get(DHTID.from_bytes(record.key))
    if held is None:
        return None
    if record.sub is PLAIN or not isinstance(held.value, DictionaryDHTValue):
        return held.expiration_time
    try:
        entry = held.value.data.get(record.sub)
    except TypeError:  # an unhashable subkey: hivemind's own store of it raises
        return None
    return None if entry is None else entry.expiration_time


class Holdings:
    """The books of what each sender has us hold (module docstring); `clock` is DHT time (unix seconds)."""

    def __init__(self, max_bytes: int, share: float = SENDER_SHARE, clock=time.time):
        self.max_bytes, self.per_sender, self.clock = max_bytes, max(1, int(share * max_bytes)), clock
        self._held: dict[tuple, tuple[str, Record]] = {}  # slot → (sender, the copy storage holds)
        self._under: dict[tuple[bytes, bool], set[bytes]] = {}  # (key, cache) → the subkeys booked under it
        self._heap: list[tuple[float, int, tuple, str]] = []  # each stored copy: (expiration, seq, slot, sender)
        self._seq = 0
        self._by_sender: Counter = Counter()
        self.total = 0
        self._reserved: Counter = Counter()  # by sender: admitted, not yet settled (hivemind's store under way)
        self.refused: Counter = Counter()  # records refused, by reason
        self.not_stored: Counter = Counter()  # records hivemind would not have stored either (nothing charged)
        self._logged = 0.0

    def _charge(self, sender: str, cost: int) -> None:
        self.total += cost
        self._by_sender[sender] += cost
        if self._by_sender[sender] <= 0:
            del self._by_sender[sender]

    def _release(self, slot: tuple) -> None:
        sender, record = self._held.pop(slot)
        self._charge(sender, -record.cost)
        under = self._under[record.key, record.cache]
        under.discard(record.tag)
        if not under:
            del self._under[record.key, record.cache]

    def _expire(self, now: float) -> None:
        while self._heap and self._heap[0][0] <= now:
            _, _, slot, sender = heapq.heappop(self._heap)
            self._charge(sender, -STORE_COST)
            held = self._held.get(slot)
            if held is not None and held[1].expiration <= now:
                self._release(slot)

    def admit(self, sender: str, records: list[Record], held: Held = _nothing_held) -> tuple[str | None, list[Record]]:
        """May `sender` have us hold `records` (all or none)? (None, those hivemind would store: newer than the copy
        `held` says storage has, not expired) or (why not, [])."""
        now = self.clock()
        self._expire(now)
        reason = None
        for record in records:
            if record.size > MAX_VALUE_BYTES:
                reason = "too_big"
            elif record.expiration > now + MAX_AHEAD_S:
                reason = reason or "too_far"
        if reason is not None:
            return self._refuse(reason, len(records), now), []
        fresh = []
        for record in records:
            copy, reason = held(record), None
            if record.expiration < now:
                reason = "expired"
            elif copy is not None and record.expiration <= copy:
                reason = "not_newer"
            if reason is None:
                fresh.append(record)
            else:
                self.not_stored[reason] += 1
        total = mine = 0
        reason = None
        for record in fresh:
            total += record.cost + STORE_COST
            mine += record.cost + STORE_COST
            old = self._held.get(record.slot)
            if old is not None:  # released if this copy replaces it
                total -= old[1].cost
                mine -= old[1].cost if old[0] == sender else 0
        if self.total + sum(self._reserved.values()) + total > self.max_bytes:
            reason = "full"
        elif self._by_sender[sender] + self._reserved[sender] + mine > self.per_sender:
            reason = "sender_full"
        if reason is not None:
            return self._refuse(reason, len(fresh), now), []
        self._reserved[sender] += sum(record.cost + STORE_COST for record in fresh)  # until settle
        return None, fresh

    def _refuse(self, reason: str, n: int, now: float) -> str:
        self.refused[reason] += n
        if now - self._logged > 60:
            self._logged = now
            log.info("DHT records refused so far (what we hold for other peers is bounded): %s; held %.1f MiB",
                     dict(self.refused), self.total / 2**20)
        return reason

    def settle(self, sender: str, records: list[Record], held: Held) -> None:
        """After hivemind's store of `records` (admitted for `sender`): charge `sender` each store's heap entry and
        each copy storage now holds, release the copies they replaced, and any booked under their keys that storage
        no longer holds."""
        self._reserved[sender] -= sum(record.cost + STORE_COST for record in records)
        if self._reserved[sender] <= 0:
            del self._reserved[sender]
        for record in records:
            self._charge(sender, STORE_COST)  # hivemind's heap entry of the store, kept until its expiration
            self._seq += 1
            heapq.heappush(self._heap, (record.expiration, self._seq, record.slot, sender))
            old = self._held.get(record.slot)
            if held(record) != record.expiration or (old is not None and old[1].expiration == record.expiration):
                continue  # hivemind did not keep this copy, or the books have it already
            if old is not None:
                self._release(record.slot)
            self._held[record.slot] = (sender, record)
            self._under.setdefault((record.key, record.cache), set()).add(record.tag)
            self._charge(sender, record.cost)
        for key, cache in {(r.key, r.cache) for r in records}:
            for tag in list(self._under.get((key, cache), ())):
                booked = self._held[key, tag, cache][1]
                if held(booked) != booked.expiration:
                    self._release((key, tag, cache))

    def held_by(self, sender: str) -> int:
        return self._by_sender.get(sender, 0)

    def stats(self) -> dict:
        """What is held and refused so far (the largest holders, by the last 12 characters of their peer id)."""
        top = sorted(self._by_sender.items(), key=lambda kv: -kv[1])[:4]
        return {"held_bytes": self.total, "records": len(self._held), "senders": len(self._by_sender),
                "refused": dict(self.refused), "not_stored": dict(self.not_stored),
                "top_senders": {k[-12:]: v for k, v in top}}


def _records(key: bytes, tag: bytes, value: bytes, expiration: float,
             cache: bool = False) -> tuple[list[Record], DictionaryDHTValue | None] | None:
    """The records one store item asks us to hold, and the dictionary it carries (if any); None when a dictionary
    item does not decode."""
    if tag != DHTProtocol.IS_DICTIONARY:
        if tag == DHTProtocol.IS_REGULAR_VALUE:
            return [Record(key, tag, len(value), expiration, cache)], None
        try:
            sub = MSGPackSerializer.loads(tag)
        except Exception:
            sub = None  # hivemind's own decode of it raises
        return [Record(key, tag, len(value), expiration, cache, sub)], None
    if len(value) > MAX_DICTIONARY_BYTES:  # refused unread
        return [Record(key, tag, len(value), expiration, cache)], None
    try:
        dictionary = MSGPackSerializer.loads(value)
    except Exception:
        return None
    if not isinstance(dictionary, DictionaryDHTValue):
        return None
    return [Record(key, MSGPackSerializer.dumps(sub), len(item.value), item.expiration_time, cache, sub)
            for sub, item in dictionary.items()], dictionary


def _with_only(dictionary: DictionaryDHTValue, records: list[Record]) -> bytes:
    """`dictionary` with only the entries of `records`, serialised as a store item's value."""
    kept = DictionaryDHTValue()
    with kept.freeze():
        for record in records:
            kept.store(record.sub, dictionary.data[record.sub].value, record.expiration)
    return MSGPackSerializer.dumps(kept)


def handler(store, books: Holdings):
    """`store` (hivemind's DHTProtocol.rpc_store) behind `books`: what `install` puts in DHTProtocol."""

    async def rpc_store(self, request: dht_pb2.StoreRequest, context: P2PContext) -> dht_pb2.StoreResponse:
        sender = context.remote_id.to_base58()

        def held(record: Record) -> float | None:
            return held_in(self.cache if record.cache else self.storage, record)

        items = list(zip(request.keys, request.subkeys, request.values, request.expiration_time, request.in_cache))
        passed, answers, fresh = [], [], []  # answers: False, True (nothing to store) or the index of a passed item
        try:
            for key, tag, value, expiration, in_cache in items:
                parsed = _records(key, tag, value, expiration, bool(in_cache))
                reason, records = (None, []) if parsed is None else books.admit(sender, parsed[0], held)
                fresh.extend(records)  # reserved by admit until settle
                if parsed is None or reason is not None or (parsed[0] and not records):
                    answers.append(False)
                    continue
                if len(records) < len(parsed[0]):  # a dictionary item with entries we hold: hivemind answers it refused
                    value = _with_only(parsed[1], records)
                    answers.append(False)
                else:
                    answers.append(len(passed) if records else True)
                if records:
                    passed.append((key, tag, value, expiration, in_cache))
            if passed == items:
                response = await store(self, request, context)
            else:  # what is left, maybe nothing (hivemind still meets request.peer, as it does on every store)
                keys, subkeys, values, expirations, in_cache = map(list, zip(*passed)) if passed else ([],) * 5
                inner = dht_pb2.StoreRequest(keys=keys, subkeys=subkeys, values=values, expiration_time=expirations,
                                             in_cache=in_cache, peer=request.peer)
                response = await store(self, inner, context)
        finally:  # even if hivemind's store raised part way: what it stored is charged, the rest unreserved
            books.settle(sender, fresh, held)
        ok = list(response.store_ok)
        return dht_pb2.StoreResponse(store_ok=[a if isinstance(a, bool) else ok[a] for a in answers],
                                     peer=self.node_info)

    rpc_store.holds = True
    return rpc_store


holdings: Holdings | None = None  # this process's, once installed


def install(max_bytes: int) -> Holdings:
    """Put a Holdings of `max_bytes` in front of hivemind's DHT store handler (in this process; idempotent)."""
    global holdings
    if getattr(DHTProtocol.rpc_store, "holds", False):
        return holdings
    holdings = Holdings(max_bytes)
    DHTProtocol.rpc_store = handler(DHTProtocol.rpc_store, holdings)
    return holdings
