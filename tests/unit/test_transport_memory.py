"""In-memory transport (swarm.transport): gather semantics and the receive-side rules shared with
the hivemind transport — dedupe, min_peers, timeouts, drops by reason, quotas."""

from __future__ import annotations

import threading
import time
from collections import Counter

import msgpack
import pytest
import zstandard

from protocols.codec import (
    Caps,
    RecordError,
    encode_announcement,
    encode_bundle,
    sha256_hex,
)
from protocols.records import (
    Announcement,
    Completion,
    ModelInfo,
    RolloutRecord,
    SamplingInfo,
    TaskRef,
)
from swarm.memory import InMemoryHub, InMemoryTransport
from swarm.transport import Limits, make_bundle, rollouts_key, vet_announcement

FP = "cd" * 32


def _record(peer: str, round_: int = 0, index: int = 0, swarm: str = "rlswarm", n_tokens: int = 3) -> RolloutRecord:
    ids = tuple(1 + i % 500 for i in range(n_tokens))
    return RolloutRecord(
        swarm=swarm, peer=peer, round=round_, policy_version=round_, created_at=1700000000.25,
        model=ModelInfo("tiny-qwen2", FP, 512), sampling=SamplingInfo(1.0, 1.0, 8),
        task=TaskRef("chain_sum", {"min_terms": 2}, 0, index), prompt=f"Q{index}",
        completions=(Completion("<answer>5</answer>", ids, tuple(-0.5 for _ in ids), "stop", 1.0),))


def _swarm(*names: str, **kw) -> tuple[InMemoryHub, dict[str, InMemoryTransport]]:
    hub = InMemoryHub()
    return hub, {n: InMemoryTransport(hub, n, **kw) for n in names}


def _announce_raw(hub: InMemoryHub, signer: str | None, round_: int, data: bytes, *, peer: str | None = None,
                  count: int = 1, nbytes: int | None = None) -> None:
    """Serve ``data`` as ``signer``'s bundle and announce it (fields overridable to lie)."""
    hub.serve(signer or "nobody", data)
    ann = Announcement(peer=peer or signer or "nobody", round=round_, count=count,
                       nbytes=len(data) if nbytes is None else nbytes, sha256=sha256_hex(data),
                       policy_version=0, created_at=1.0)
    hub.announce(rollouts_key("rlswarm", round_), signer, encode_announcement(ann))


def test_every_peer_gets_the_others_records_once():
    _, t = _swarm("A", "B", "C")
    for name, tr in t.items():
        assert tr.publish(0, [_record(name, 0, i) for i in range(2)]) > 0
    for name, tr in t.items():
        got = tr.gather([0], timeout=1.0, min_peers=2)
        others = sorted(n for n in t if n != name)
        assert sorted(got.peers) == others
        # 2 peers × 2 records, equal field by field to what they published
        assert sorted(got.records, key=lambda r: (r.peer, r.task.index)) == [
            _record(p, 0, i) for p in others for i in range(2)]
        assert got.drops == Counter()
        assert got.latency_s is not None and got.latency_s >= 0
        again = tr.gather([0], timeout=0.0, min_peers=0)  # dedupe: nothing twice
        assert again.records == [] and again.peers == [] and again.latency_s is None


def test_republished_round_is_a_new_bundle():
    _, t = _swarm("A", "B")
    t["A"].publish(0, [_record("A", 0, 0)])
    assert len(t["B"].gather([0], 0.0, 0).records) == 1
    t["A"].publish(0, [_record("A", 0, 1)])  # new sha256 → a new bundle key
    assert [r.task.index for r in t["B"].gather([0], 0.0, 0).records] == [1]


def test_min_peers_returns_early_and_timeout_bounds_the_wait():
    _, t = _swarm("A", "B", "C")
    t["B"].publish(0, [_record("B")])
    start = time.monotonic()
    got = t["A"].gather([0], timeout=5.0, min_peers=1)  # B settled → no wait for C
    assert time.monotonic() - start < 2.5 and got.peers == ["B"]
    start = time.monotonic()
    got = t["A"].gather([0], timeout=0.3, min_peers=2)  # C never publishes: wait exactly the timeout
    elapsed = time.monotonic() - start
    assert 0.3 <= elapsed < 2.0 and got.records == []


def test_min_peers_none_waits_for_peers_of_recent_rounds():
    _, t = _swarm("A", "B", "C")
    for n in ("B", "C"):
        t[n].publish(0, [_record(n, 0)])
    assert sorted(t["A"].gather([0], 1.0, None).peers) == ["B", "C"]
    t["B"].publish(1, [_record("B", 1)])
    start = time.monotonic()  # before the timer starts: C publishes ≥ 0.2 s after `start`
    threading.Timer(0.2, lambda: t["C"].publish(1, [_record("C", 1)])).start()
    got = t["A"].gather([1], timeout=3.0, min_peers=None)  # B and C were seen in round 0: wait for both
    assert 0.2 <= time.monotonic() - start < 2.0 and sorted(got.peers) == ["B", "C"]


def test_min_peers_zero_takes_what_arrived_without_waiting():
    _, t = _swarm("A", "B")
    start = time.monotonic()
    assert t["A"].gather([0, 1], timeout=10.0, min_peers=0).records == []
    assert time.monotonic() - start < 2.0


def test_dead_peer_after_announcing_is_counted_not_waited_for():
    hub, t = _swarm("A", "B", "C")
    t["B"].publish(0, [_record("B")])
    t["C"].publish(0, [_record("C")])
    t["C"].shutdown()  # announced, then died: bytes unreachable
    start = time.monotonic()
    got = t["A"].gather([0], timeout=5.0, min_peers=2)
    assert time.monotonic() - start < 2.5  # C is settled (as a failed fetch), so no wait
    assert got.peers == ["B"] and got.drops == Counter({"fetch_failed": 1})
    with pytest.raises(RuntimeError):
        t["C"].publish(1, [])


def test_bad_bundles_are_dropped_by_reason_and_good_ones_still_arrive():
    hub, t = _swarm("A", "B")
    t["B"].publish(0, [_record("B")])
    _announce_raw(hub, "Z1", 0, b"\x00not zstd")
    _announce_raw(hub, "Z2", 0, zstandard.ZstdCompressor().compress(b"\xc1"))  # 0xc1: never valid msgpack
    _announce_raw(hub, "Z3", 0, encode_bundle([_record("B")]))  # Z3 ships a record in B's name
    _announce_raw(hub, "Z4", 0, encode_bundle([_record("Z4", swarm="other")]))
    _announce_raw(hub, "Z5", 0, encode_bundle([_record("Z5", round_=7)]))
    _announce_raw(hub, "Z6", 0, encode_bundle([_record("Z6")]), peer="B")  # announcement in B's name
    _announce_raw(hub, None, 0, encode_bundle([_record("Z7")]), peer="Z7")  # unsigned subkey
    hub.announce(rollouts_key("rlswarm", 0), "Z8", b"\x93garbage")
    data = encode_bundle([_record("Z9")])
    hub.serve("Z9", data + b"x")  # served bytes differ from the announced digest
    hub.announce(rollouts_key("rlswarm", 0), "Z9", encode_announcement(Announcement(
        "Z9", 0, 1, len(data), sha256_hex(data), 0, 1.0)))
    got = t["A"].gather([0], timeout=0.0, min_peers=0)
    assert [r.peer for r in got.records] == ["B"]
    assert got.drops == Counter({"zstd": 1, "msgpack": 1, "forged": 3, "wrong_swarm": 1, "wrong_round": 1,
                                 "bad_announcement": 1, "fetch_failed": 1})


def test_caps_and_quotas_refuse_before_fetching():
    hub, t = _swarm("A", "B", caps=Caps(max_compressed_bytes=4096, max_records=4),
                    max_records_per_peer_round=2, max_bytes_per_peer_round=2048)
    t["B"].publish(0, [_record("B", 0, 0)])  # within every limit
    _announce_raw(hub, "Z1", 0, b"x", nbytes=5000)  # > max_compressed_bytes: too_large
    _announce_raw(hub, "Z2", 0, b"x", count=5)  # > caps.max_records
    _announce_raw(hub, "Z3", 0, b"x", count=3)  # > 2 records per peer per round
    _announce_raw(hub, "Z4", 0, b"x", nbytes=3000)  # > 2048 bytes per peer per round
    # announces 1 record but ships 3: the decoded count is checked against the quota as well
    _announce_raw(hub, "Z5", 0, encode_bundle([_record("Z5", 0, i) for i in range(3)]), count=1)
    got = t["A"].gather([0], 0.0, 0)
    assert [r.peer for r in got.records] == ["B"]
    assert got.drops == Counter({"too_large": 1, "too_many_records": 1, "quota": 3})


def test_quota_is_cumulative_over_reannouncements():
    hub, t = _swarm("A", "B", max_records_per_peer_round=3)
    t["B"].publish(0, [_record("B", 0, 0), _record("B", 0, 1)])
    assert len(t["A"].gather([0], 0.0, 0).records) == 2
    t["B"].publish(0, [_record("B", 0, 2), _record("B", 0, 3)])  # 2 + 2 > 3
    got = t["A"].gather([0], 0.0, 0)
    assert got.records == [] and got.drops == Counter({"quota": 1})


def test_drops_are_reported_once_and_only_for_requested_rounds():
    hub, t = _swarm("A")
    _announce_raw(hub, "Z", 3, b"junk")
    assert t["A"].gather([2], 0.0, 0).drops == Counter()
    assert t["A"].gather([3], 0.0, 0).drops == Counter({"zstd": 1})
    assert t["A"].gather([3], 0.0, 0).drops == Counter()


def test_large_bundle_round_trips_field_for_field():
    _, t = _swarm("A", "B")
    recs = [_record("B", 0, i, n_tokens=2000) for i in range(5)]
    nbytes = t["B"].publish(0, recs)
    assert nbytes > 0 and t["A"].gather([0], 1.0, 1).records == recs


def test_vet_announcement_binds_signer_round_and_size():
    limits = Limits()
    _, value, ann = make_bundle("P", 4, [_record("P", 4)])
    assert vet_announcement(value, "P", 4, limits) == ann
    for signer, round_, reason in (("Q", 4, "forged"), (None, 4, "forged"), ("P", 5, "bad_announcement")):
        with pytest.raises(RecordError) as exc:
            vet_announcement(value, signer, round_, limits)
        assert exc.value.reason == reason
    big = msgpack.packb({"peer": "P"}) + b"\x00" * 2000  # > 1 KiB: refused before parsing
    with pytest.raises(RecordError) as exc:
        vet_announcement(big, "P", 4, limits)
    assert exc.value.reason == "bad_announcement"


def test_latency_is_time_until_the_last_bundle_settled():
    _, t = _swarm("A", "B")
    timer = threading.Timer(0.3, lambda: t["B"].publish(0, [_record("B")]))
    t0 = time.monotonic()
    timer.start()
    before = time.monotonic()
    got = t["A"].gather([0], timeout=5.0, min_peers=1)
    elapsed = time.monotonic() - before
    # B publishes 0.3 s after the timer started, i.e. 0.3 s minus the (small) delay before the call began
    assert 0.3 - (before - t0) <= got.latency_s <= elapsed < 5.0
    t["B"].publish(1, [_record("B", 1)])
    t["A"]._poll([1])  # round 1 settles before the next call starts
    assert t["A"].gather([1], timeout=1.0, min_peers=1).latency_s == 0.0  # settled before the call


def test_forget_before_drops_old_bookkeeping_only():
    hub, t = _swarm("A", "B")
    for r in (0, 1, 2):
        t["B"].publish(r, [_record("B", r)])
    assert len(t["A"].gather([0, 1, 2], 0.0, 0).records) == 3
    t["A"].inbox.forget_before(2)
    assert {k[1] for k in t["A"].inbox.claimed} == {2}
    assert t["A"].gather([2], 0.0, 0).records == []  # round 2 is still deduplicated
