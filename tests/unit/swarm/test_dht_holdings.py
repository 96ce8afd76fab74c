"""The books of what a node's DHT process holds for other peers (swarm.dht.holdings): per record, per sender and in
all, following what hivemind's storage keeps — driven through the store handler in front of hivemind's own
DHTProtocol.rpc_store, over hivemind's DHTLocalStorage (a protocol without a network: a store request, as a peer
sends it, handled in this process).

Before the books followed storage, every record was charged to the last peer that sent it, even when hivemind kept the
copy it had: a peer handing over entries the node already held (hivemind's replication to a peer it has just met)
was charged for them, and reached its share with entries it did not own (docs/benchmarks/reliability.md §15I)."""

from __future__ import annotations

import asyncio
import time

from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.routing import DHTID
from hivemind.dht.storage import DHTLocalStorage, DictionaryDHTValue
from hivemind.p2p import P2PContext, PeerID
from hivemind.proto import dht_pb2
from hivemind.utils.serializer import MSGPackSerializer

from swarm.dht.holdings import MAX_AHEAD_S, MAX_VALUE_BYTES, RECORD_COST, STORE_COST, Holdings, _records, handler

KEY_BYTES = len(DHTID.generate(source="k").to_bytes())


def _cost(subkey: str, size: int) -> int:
    return KEY_BYTES + len(MSGPackSerializer.dumps(subkey)) + size + RECORD_COST + STORE_COST


class Node:
    """A DHT peer's store handler as install() sets it up, over hivemind's own storage, without a network."""

    def __init__(self, books: Holdings):
        self.books, self.rpc_store = books, handler(DHTProtocol.rpc_store, books)
        self.protocol = object.__new__(DHTProtocol)  # only what rpc_store uses
        self.protocol.storage, self.protocol.cache = DHTLocalStorage(), DHTLocalStorage(maxsize=100)
        self.protocol.record_validator, self.protocol.node_info = None, dht_pb2.NodeInfo()

    def store(self, sender: str, items: list[tuple]) -> list[bool]:
        """`items`: (key, subkey, value, expiration); subkey None with a DictionaryDHTValue: the whole dictionary."""
        request = dht_pb2.StoreRequest(
            keys=[DHTID.generate(source=k).to_bytes() for k, _, _, _ in items],
            subkeys=[DHTProtocol.IS_DICTIONARY if isinstance(v, DictionaryDHTValue) else MSGPackSerializer.dumps(s)
                     for _, s, v, _ in items],
            values=[MSGPackSerializer.dumps(v) if isinstance(v, DictionaryDHTValue) else v for _, _, v, _ in items],
            expiration_time=[e for _, _, _, e in items], in_cache=[False] * len(items))
        context = P2PContext(handle_name="rpc_store", local_id=PeerID(b"node"), remote_id=PeerID(sender.encode()))
        return list(asyncio.run(self.rpc_store(self.protocol, request, context)).store_ok)

    def held(self, key: str) -> DictionaryDHTValue | bytes | None:
        found = self.protocol.storage.get(DHTID.generate(source=key))
        return None if found is None else found.value

    def by(self, sender: str) -> int:
        return self.books.held_by(PeerID(sender.encode()).to_base58())


def _dictionary(entries: dict[str, tuple[bytes, float]]) -> DictionaryDHTValue:
    d = DictionaryDHTValue()
    for sub, (value, expiration) in entries.items():
        d.store(sub, value, expiration)
    return d


def test_a_copy_no_newer_than_the_one_held_costs_nothing_and_a_newer_one_moves_the_charge():
    t = time.time() + 600
    node = Node(Holdings(1 << 20))
    assert node.store("alice", [("w", f"a{i}", b"v" * 100, t) for i in range(3)]) == [True] * 3
    assert node.by("alice") == 3 * _cost("a0", 100) and node.by("bob") == 0
    # bob hands the node the dictionary it holds (hivemind's hand-off to a peer it has just met): answered refused,
    # as hivemind answers it, and nothing charged to bob (before: 3 records charged to bob, none to alice)
    handed = node.held("w")
    assert node.store("bob", [("w", None, handed, t)]) == [False]
    assert node.by("bob") == 0 and node.by("alice") == 3 * _cost("a0", 100)
    assert node.store("bob", [("w", "a0", b"v" * 100, t - 60)]) == [False]  # an older copy: the same
    assert node.by("bob") == 0 and node.books.not_stored == {"not_newer": 4}
    assert node.held("w").get("a0").expiration_time == t
    # a newer copy replaces alice's: its record is charged to bob now, alice keeps the store's heap entry until t
    assert node.store("bob", [("w", "a0", b"u" * 50, t + 60)]) == [True]
    assert node.by("bob") == _cost("a0", 50) and node.by("alice") == 2 * _cost("a0", 100) + STORE_COST
    # a hand-off with one entry the node lacks: that entry alone is stored and charged; answered as hivemind would
    handed = _dictionary({"c0": (b"c" * 10, t), "a1": (b"v" * 100, t)})
    assert node.store("bob", [("w", None, handed, t)]) == [False]
    assert node.held("w").get("c0").value == b"c" * 10 and node.by("bob") == _cost("a0", 50) + _cost("c0", 10)
    # a value under the key replaces the whole dictionary: every entry's charge released
    assert node.store("carol", [("w", None, b"x" * 10, t + 120)]) == [True]
    assert node.by("bob") == 2 * STORE_COST and node.by("alice") == 3 * STORE_COST
    assert node.books.stats()["records"] == 1


def test_a_peer_handing_over_what_the_node_holds_keeps_its_share_for_its_own_announcements():
    t = time.time() + 600
    node = Node(Holdings(1 << 20, share=3 * _cost("a0", 100) / (1 << 20)))  # 3 records a sender
    assert node.store("alice", [("w", f"a{i}", b"v" * 100, t) for i in range(3)]) == [True] * 3
    for _ in range(5):  # bob drops out of the node's routing table and back: the same hand-off each time
        assert node.store("bob", [("w", None, node.held("w"), t)]) == [False]
    assert node.store("bob", [("w", "b0", b"b" * 100, t)]) == [True]  # before: sender_full
    assert node.books.refused == {} and node.by("bob") == _cost("b0", 100)


def test_a_record_too_big_or_too_far_ahead_is_refused_whatever_the_room():
    now = time.time()
    node = Node(Holdings(1 << 30))
    assert node.store("a", [("k0", "s", b"x" * (MAX_VALUE_BYTES + 1), now + 600)]) == [False]
    assert node.store("a", [("k1", "s", b"x", now + MAX_AHEAD_S + 60)]) == [False]
    assert node.store("a", [("k2", "s", b"x" * MAX_VALUE_BYTES, now + MAX_AHEAD_S - 60)]) == [True]
    assert node.books.refused == {"too_big": 1, "too_far": 1} and node.held("k0") is None


def test_one_sender_holds_at_most_its_share_and_all_of_them_at_most_the_total():
    cost, t = _cost("s", 100), time.time() + 600
    node = Node(Holdings(16 * cost, share=1 / 4))  # 4 records a sender, 16 in all
    assert node.store("a", [(f"a{i}", "s", b"v" * 100, t) for i in range(5)]) == [True] * 4 + [False]
    for s in "bcd":
        assert node.store(s, [(f"{s}{i}", "s", b"v" * 100, t) for i in range(4)]) == [True] * 4
    assert node.store("e", [("e0", "s", b"v" * 100, t)]) == [False] and node.books.total == 16 * cost
    assert node.books.refused == {"sender_full": 1, "full": 1} and node.held("a4") is None


def test_an_honest_peer_re_storing_its_announcement_each_round_holds_one_record_and_its_stores():
    now = time.time()
    node = Node(Holdings(1 << 20))
    for r in range(8):  # 8 rounds in one window: the same key and subkey, each expiring later
        assert node.store("a", [("window", "owner", b"v" * 900, now + 600 + r)]) == [True]
    assert node.books.total == _cost("owner", 900) + 7 * STORE_COST


def test_what_expires_is_given_back():
    offset, now = [0.0], time.time()
    node = Node(Holdings(1 << 20, clock=lambda: time.time() + offset[0]))
    assert node.store("a", [("k", "s", b"v" * 100, now + 60), ("k", "s", b"v" * 100, now + 600)]) == [True, True]
    assert node.books.total == _cost("s", 100) + STORE_COST
    offset[0] = 61  # the first store's heap entry expired; the record it replaced no longer charged
    assert node.books.admit("a", [])[0] is None and node.books.total == _cost("s", 100)
    offset[0] = 601
    assert node.books.admit("a", [])[0] is None and node.books.total == 0 and not node.books.held_by("a")


def test_a_dictionary_item_is_each_of_its_entries_and_admitted_whole_or_not_at_all():
    expiration = time.time() + 600  # hivemind's dictionary drops entries expired by the wall clock
    d = _dictionary({f"sub{i}": (b"v" * 100, expiration) for i in range(3)})
    records, _ = _records(b"key", DHTProtocol.IS_DICTIONARY, MSGPackSerializer.dumps(d), expiration)
    assert sorted(r.tag for r in records) == sorted(MSGPackSerializer.dumps(f"sub{i}") for i in range(3))
    assert _records(b"key", DHTProtocol.IS_DICTIONARY, b"\xc1 not msgpack", expiration) is None
    node = Node(Holdings(2 * _cost("sub0", 100), share=1.0))
    assert node.store("a", [("key", None, d, expiration)]) == [False] and node.books.total == 0  # three do not fit
    assert node.held("key") is None and node.books.refused == {"full": 3}
    assert node.store("a", [("key", None, _dictionary({"sub0": (b"v" * 100, expiration)}), expiration)]) == [True]


def test_what_hivemind_stored_before_its_store_raised_is_charged_and_nothing_stays_reserved():
    t = time.time() + 600
    node = Node(Holdings(1 << 20))
    request = dht_pb2.StoreRequest(keys=[DHTID.generate(source=k).to_bytes() for k in ("k0", "k1")],
                                   subkeys=[MSGPackSerializer.dumps("s"), MSGPackSerializer.dumps(["un", "hashable"])],
                                   values=[b"v" * 100] * 2, expiration_time=[t, t], in_cache=[False, False])
    context = P2PContext(handle_name="rpc_store", local_id=PeerID(b"node"), remote_id=PeerID(b"a"))
    try:
        asyncio.run(node.rpc_store(node.protocol, request, context))
        raise AssertionError("hivemind's store of an unhashable subkey did not raise")
    except TypeError:
        pass
    assert node.held("k0") is not None and node.by("a") == _cost("s", 100) + STORE_COST
    assert node.store("a", [("k2", "s", b"v" * 100, t)]) == [True] and not node.books._reserved
