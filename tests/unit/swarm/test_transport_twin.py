"""The exchange by swarm time on the in-memory twin (swarm.exchange.twin): the receive rules, the fan-in
choice and `take` that every transport shares — dedupe, late joiners, bounded waits, drops by
reason, quotas, fairness, pushes."""

from __future__ import annotations

import threading
import time
from collections import Counter

import msgpack
import pytest
import zstandard

from bench.harness.records import completion, record
from protocols.announce import encode_announcement
from protocols.codec import (
    Caps,
    RecordError,
    encode_bundle,
    sha256_hex,
)
from protocols.keys import rollouts_key, shard_of, window_of
from protocols.records import Announcement, RolloutRecord
from swarm.exchange.twin import InMemoryHub, InMemoryTransport
from swarm.exchange.transport import Limits, make_bundle, vet_announcement

T0 = 1_700_000_000.0


class Clock:
    """A settable clock shared by one test's transports (swarm time)."""

    def __init__(self, t: float = T0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def _record(peer: str, round_: int = 0, index: int = 0, swarm: str = "rlswarm", n_tokens: int = 3) -> RolloutRecord:
    return record(peer, index, round_=round_, swarm=swarm, params={"min_terms": 2},
                  completions=[completion(ids=(1 + i % 500 for i in range(n_tokens)))])


def _swarm(*names: str, clock: Clock | None = None, **limits) -> tuple[InMemoryHub, dict[str, InMemoryTransport]]:
    hub, clock = InMemoryHub(), clock or Clock()
    return hub, {n: InMemoryTransport(hub, n, limits=Limits(**limits), clock=clock) for n in names}


def _announce_raw(hub: InMemoryHub, signer: str | None, data: bytes, *, peer: str | None = None, count: int = 1,
                  nbytes: int | None = None, created_at: float = T0, window: int | None = None,
                  shard: int | None = None) -> None:
    """Serve `data` as `signer`'s bundle and announce it under its window's key (fields overridable to lie)."""
    peer = peer or signer or "nobody"
    hub.serve(signer or "nobody", data)
    w = window_of(created_at, 10.0) if window is None else window
    ann = Announcement(peer=peer, window=w, count=count, nbytes=len(data) if nbytes is None else nbytes,
                       sha256=sha256_hex(data), policy_version=0, created_at=created_at)
    key_shard = shard_of(peer, 4) if shard is None else shard
    hub.announce(rollouts_key("rlswarm", window_of(created_at, 10.0), key_shard), signer, encode_announcement(ann))


def test_every_peer_gets_the_others_records_once_whatever_their_rounds():
    _, t = _swarm("A", "B", "C")
    t["B"].publish([_record("B", round_=3)])
    t["C"].publish([_record("C", round_=250)])  # round counters need not agree: exchange is by time
    got = t["A"].take()
    assert sorted(r.peer for r in got.records) == ["B", "C"] and got.peers_seen == 2
    assert t["A"].take().records == []  # handed out once
    assert [r.peer for r in t["B"].take().records] == ["C"]


def test_a_late_joiner_finds_what_was_published_within_max_age():
    clock = Clock()
    hub = InMemoryHub()
    a = InMemoryTransport(hub, "A", limits=Limits(max_fetches_per_window=100), clock=clock)
    for i in range(25):  # A runs alone for 25 "rounds", one every 30 s
        a.publish([_record("A", round_=i, index=i)])
        clock.t += 30
    b = InMemoryTransport(hub, "B", limits=Limits(max_fetches_per_window=100), clock=clock)
    got = b.take()
    # A published at T0, T0+30, …, T0+720; now is T0+750: the 20 younger than 600 s are found (older
    # windows are not even read), and A's 4 newest are fetched — a late joiner wants fresh groups
    assert sorted(r.round for r in got.records) == [21, 22, 23, 24]
    assert got.skipped == 16 and not got.drops and got.peers_seen == 1
    b.publish([_record("B")])
    assert [r.peer for r in a.take().records] == ["B"]


def test_take_waits_only_while_too_few_and_at_most_the_timeout():
    _, t = _swarm("A", "B")
    assert t["A"].peers_seen() == 0
    t["B"].publish([_record("B")])
    assert t["A"].peers_seen() == 1
    t["A"].take()  # now B is known
    timer = threading.Timer(0.3, lambda: t["B"].publish([_record("B", index=1)]))
    timer.start()
    started = time.monotonic()
    got = t["A"].take(min_records=1, timeout=5.0)
    assert [r.task.index for r in got.records] == [1] and 0.2 < time.monotonic() - started < 3.0
    started = time.monotonic()
    assert t["A"].take(min_records=1, timeout=0.3).records == []  # the timeout bounds the wait
    assert 0.25 < time.monotonic() - started < 2.0


def test_a_peer_gone_after_announcing_is_counted_not_waited_for():
    hub, t = _swarm("A", "B", "C")
    t["B"].publish([_record("B")])
    t["C"].publish([_record("C")])
    hub.disconnect("C")  # its announcement stays in the DHT, its bytes are gone
    got = t["A"].take()
    assert [r.peer for r in got.records] == ["B"] and got.drops == Counter({"fetch_failed": 1})


def test_bad_bundles_are_dropped_by_reason_and_good_ones_still_arrive():
    hub, t = _swarm("A", "B")
    t["B"].publish([_record("B")])
    _announce_raw(hub, "Z1", b"\x00not zstd")
    _announce_raw(hub, "Z2", zstandard.ZstdCompressor().compress(b"\xc1"))  # 0xc1: never valid msgpack
    _announce_raw(hub, "Z3", encode_bundle([_record("B")]))  # Z3 ships a record in B's name
    _announce_raw(hub, "Z4", encode_bundle([_record("Z4", swarm="other")]))
    _announce_raw(hub, "Z5", encode_bundle([_record("Z5"), _record("Z5", index=1)]))  # 2 records, 1 announced
    _announce_raw(hub, "Z6", encode_bundle([_record("Z6")]), peer="B")  # announcement in B's name
    _announce_raw(hub, None, encode_bundle([_record("Z7")]), peer="Z7")  # unsigned subkey
    hub.announce(rollouts_key("rlswarm", window_of(T0, 10.0), shard_of("Z8", 4)), "Z8", b"\x93garbage")
    data = encode_bundle([_record("Z9")])
    _announce_raw(hub, "Z9", data)
    hub.serve("Z9", data + b"x")  # other bytes under... a different digest: the announced one is missing
    hub._blobs[("Z9", sha256_hex(data))] = data + b"x"  # the announced digest now serves other bytes
    got = t["A"].take()
    assert [r.peer for r in got.records] == ["B"]
    assert got.drops == Counter({"zstd": 1, "msgpack": 1, "forged": 3, "wrong_swarm": 1, "count_mismatch": 1,
                                 "bad_announcement": 1, "digest_mismatch": 1})


def test_announcements_are_vetted_for_time_window_and_shard_before_fetching():
    clock = Clock(T0 + 15)
    hub, t = _swarm("A", clock=clock)
    body = encode_bundle([_record("Z")])
    _announce_raw(hub, "Z1", body, created_at=T0 - 590)  # its window is read, but it is 605 s old
    _announce_raw(hub, "Z3", body, window=window_of(T0, 10.0) + 1)  # window ≠ its created_at's
    _announce_raw(hub, "Z4", body, shard=(shard_of("Z4", 4) + 1) % 4)  # under another peer's shard
    _, ahead, _ = make_bundle("Z2", [_record("Z2")], now=T0 + 15 + 121)  # a clock 121 s ahead
    hub.notify("A", "Z2", ahead)  # pushes carry no window key: the skew check still applies
    got = t["A"].take()
    assert got.records == [] and got.peers_seen == 0
    assert got.drops == Counter({"stale_age": 1, "future_timestamp": 1, "bad_announcement": 2})


def test_caps_and_window_quotas_refuse_before_fetching():
    hub, t = _swarm("A", "B", caps=Caps(max_compressed_bytes=4096, max_records=4),
                    max_records_per_peer_window=2, max_bytes_per_peer_window=2048)
    t["B"].publish([_record("B")])  # within every limit
    _announce_raw(hub, "Z1", b"x", nbytes=5000)  # > max_compressed_bytes: too_large
    _announce_raw(hub, "Z2", b"x", count=5)  # > caps.max_records
    _announce_raw(hub, "Z3", b"x", count=3)  # > 2 records per peer per window
    _announce_raw(hub, "Z4", b"x", nbytes=3000)  # > 2048 bytes per peer per window
    got = t["A"].take()
    assert [r.peer for r in got.records] == ["B"]
    assert got.drops == Counter({"too_large": 1, "too_many_records": 1, "quota": 2})
    t["B"].publish([_record("B", index=1), _record("B", index=2)])  # 1 + 2 > 2 in the same window
    got = t["A"].take()
    assert got.records == [] and got.drops == Counter({"quota": 1})


def test_fan_in_is_bounded_per_window_and_fair_across_peers():
    clock = Clock()
    names = [f"P{i}" for i in range(10)]
    hub, t = _swarm("A", *names, clock=clock, max_fetches_per_window=4)
    for k in range(2):  # every peer publishes in two windows (one value per peer per window key)
        for n in names:
            t[n].publish([_record(n, index=k)])
        clock.t += 10.0
    got = t["A"].take()
    assert len(got.records) == 4 and len({r.peer for r in got.records}) == 4  # 4 bundles, 4 peers
    assert all(r.task.index == 1 for r in got.records)  # each peer's newest first
    clock.t += 10.0  # the next window of wall time: 4 more, from peers not fetched yet
    got2 = t["A"].take()
    assert len(got2.records) == 4 and not {r.peer for r in got2.records} & {r.peer for r in got.records}
    clock.t += 600  # the 12 left age out unfetched: counted as skipped, not as drops
    got3 = t["A"].take()
    assert got3.records == [] and got3.skipped == 12 and not got3.drops


def test_a_push_reaches_a_known_peer_without_the_dht_and_is_bound_to_the_sender():
    hub, t = _swarm("A", "B", "C")
    t["A"].publish([_record("A")])
    t["B"].take()  # B has seen A: B pushes its next announcements to A
    _, value, _ = make_bundle("B", [_record("B")], now=T0)
    hub.serve("B", encode_bundle([_record("B")]))
    hub.notify("A", "B", value)  # pushed only: never stored in the DHT
    hub.notify("A", "C", value)  # C pushes an announcement that names B: forged
    got = t["A"].take()
    assert [r.peer for r in got.records] == ["B"] and got.drops == Counter({"forged": 1})


def test_large_bundle_round_trips_field_for_field():
    _, t = _swarm("A", "B")
    recs = [_record("B", 0, i, n_tokens=2000) for i in range(5)]
    nbytes = t["B"].publish(recs)
    got = t["A"].take()
    assert nbytes > 0 and got.records == recs and got.bytes == nbytes


def test_vet_announcement_binds_signer_window_shard_and_size():
    limits = Limits()
    _, value, ann = make_bundle("P", [_record("P")], now=T0)
    w, s = window_of(T0, 10.0), shard_of("P", 4)
    assert vet_announcement(value, "P", limits, now=T0, key_window=w, key_shard=s) == ann
    cases = [("Q", w, s, "forged"), (None, w, s, "forged"), ("P", w + 1, s, "bad_announcement"),
             ("P", w, (s + 1) % 4, "bad_announcement")]
    for signer, key_w, key_s, reason in cases:
        with pytest.raises(RecordError) as exc:
            vet_announcement(value, signer, limits, now=T0, key_window=key_w, key_shard=key_s)
        assert exc.value.reason == reason
    big = msgpack.packb({"peer": "P"}) + b"\x00" * 2000  # > 1 KiB: refused before parsing
    with pytest.raises(RecordError) as exc:
        vet_announcement(big, "P", limits, now=T0)
    assert exc.value.reason == "bad_announcement"


def test_by_rounds_what_is_published_in_round_r_is_visible_from_round_r_plus_delay():
    clock = Clock()
    hub = InMemoryHub(delay_rounds=1)
    t = {n: InMemoryTransport(hub, n, clock=clock) for n in ("A", "B")}
    t["A"].take(), t["B"].take()
    t["A"].publish([_record("A", round_=0)])
    assert t["B"].take(min_records=1, timeout=5.0).records == []  # the same round: not yet, and no waiting
    hub.round, clock.t = 1, T0 + 10
    t["B"].publish([_record("B", round_=1)])
    got = t["B"].take()
    assert [r.round for r in got.records] == [0]  # round 0's bundle, read from the hub
    t["A"].publish([_record("A", round_=1, index=1)])
    _, value, _ = make_bundle("A", [_record("A", round_=1, index=1)], now=clock.t)
    hub.notify("B", "A", value)  # pushed as well as announced
    assert t["B"].take().records == []  # round 1's announcement and push wait for round 2
    assert [r.peer for r in t["A"].take().records] == []
    hub.round, clock.t = 2, T0 + 20
    assert [(r.peer, r.round) for r in t["B"].take().records] == [("A", 1)]  # once, though pushed and announced
    assert [(r.peer, r.round) for r in t["A"].take().records] == [("B", 1)]


def test_by_rounds_a_read_finds_the_newest_announcement_already_visible():
    hub = InMemoryHub(delay_rounds=2)
    hub.announce("k", "A", b"r0")
    hub.round = 1
    hub.announce("k", "A", b"r1")
    assert hub.announcements("k") == {}
    hub.round = 2
    assert hub.announcements("k") == {"A": b"r0"}  # r1 replaces it only once r1 is visible
    hub.round = 3
    assert hub.announcements("k") == {"A": b"r1"}
    assert InMemoryHub().announcements("k") == {}  # by clock: a separate hub, nothing announced
    with pytest.raises(ValueError):
        InMemoryHub(delay_rounds=-1)
