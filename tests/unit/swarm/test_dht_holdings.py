"""The books of what a node's DHT process holds for other peers (swarm.dht.holdings.Holdings): per record, per
sender and in all; a replacement frees nothing it should not; what expires is given back."""

from __future__ import annotations

import time

from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.storage import DictionaryDHTValue
from hivemind.utils.serializer import MSGPackSerializer

from swarm.dht.holdings import MAX_AHEAD_S, MAX_VALUE_BYTES, RECORD_COST, STORE_COST, Holdings, _records


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def _rec(i: int, size: int = 100, ahead: float = 600.0, now: float = 1000.0):
    return (b"k%03d" % i, b"s", size, now + ahead)


def test_a_record_too_big_or_too_far_ahead_is_refused_whatever_the_room():
    h = Holdings(1 << 30, clock=Clock())
    assert h.admit("a", [_rec(0, size=MAX_VALUE_BYTES + 1)]) == "too_big"
    assert h.admit("a", [_rec(1, ahead=MAX_AHEAD_S + 1)]) == "too_far"
    assert h.admit("a", [_rec(2, size=MAX_VALUE_BYTES, ahead=MAX_AHEAD_S)]) is None
    assert h.refused == {"too_big": 1, "too_far": 1}


def test_one_sender_holds_at_most_its_share_and_all_of_them_at_most_the_total():
    cost = 4 + 1 + 100 + RECORD_COST + STORE_COST
    h = Holdings(16 * cost, share=1 / 4, clock=Clock())  # 4 records a sender, 16 in all
    assert [h.admit("a", [_rec(i)]) for i in range(5)] == [None] * 4 + ["sender_full"]
    for s in "bcd":
        assert all(h.admit(s, [_rec(10 * (ord(s) - 96) + i)]) is None for i in range(4))
    assert h.admit("e", [_rec(99)]) == "full" and h.total == 16 * cost


def test_a_replacement_is_charged_the_larger_record_until_the_later_expiration():
    clock = Clock()
    h = Holdings(1 << 20, clock=clock)
    assert h.admit("a", [(b"k", b"s", 4000, 1000 + 600)]) is None
    big = h.total
    # a smaller value under the same key and subkey, expiring sooner (hivemind refuses it): nothing is freed
    assert h.admit("b", [(b"k", b"s", 10, 1000 + 60)]) is None
    assert h.total == big + STORE_COST and h.held_by("b") == big and h.held_by("a") == STORE_COST
    clock.t = 1000 + 61
    assert h.admit("c", []) is None and h.total == big + STORE_COST  # b's own store expired: the record still held
    clock.t = 1000 + 601
    assert h.admit("c", []) is None and h.total == 0 and not h.held_by("a") and not h.held_by("b")


def test_an_honest_peer_re_storing_its_announcement_each_round_holds_one_record_and_its_stores():
    clock = Clock()
    h = Holdings(1 << 20, clock=clock)
    for r in range(8):  # 8 rounds in one window: the same key and subkey, each expiring later
        clock.t = 1000 + r
        assert h.admit("a", [(b"window", b"owner", 900, clock.t + 600)]) is None
    assert h.total == len(b"window") + len(b"owner") + 900 + RECORD_COST + 8 * STORE_COST


def test_a_dictionary_item_is_each_of_its_entries_and_admitted_whole_or_not_at_all():
    expiration = time.time() + 600  # hivemind's dictionary drops entries expired by the wall clock
    d = DictionaryDHTValue()
    for i in range(3):
        d.store(f"sub{i}", b"v" * 100, expiration)
    records = _records(b"key", DHTProtocol.IS_DICTIONARY, MSGPackSerializer.dumps(d), expiration)
    assert sorted(r[1] for r in records) == sorted(MSGPackSerializer.dumps(f"sub{i}") for i in range(3))
    assert _records(b"key", DHTProtocol.IS_DICTIONARY, b"\xc1 not msgpack", expiration) is None
    h = Holdings(2 * (3 + 6 + 100 + RECORD_COST + STORE_COST), share=1.0)
    assert h.admit("a", records) == "full" and h.total == 0  # three do not fit: none is held
    assert h.admit("a", records[:2]) is None
