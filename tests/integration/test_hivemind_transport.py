"""Real hivemind peers on 127.0.0.1: one bootstrap peer and three HivemindTransports (module scope),
plus a rogue transport that serves and announces hostile data through the real DHT and streams."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from protocols.codec import encode_announcement, encode_bundle, sha256_hex
from protocols.records import (
    Announcement,
    Completion,
    ModelInfo,
    RolloutRecord,
    SamplingInfo,
    TaskRef,
)
from swarm.config import SwarmConfig
from swarm.dht import BootstrapUnreachable
from swarm.hivemind_transport import HivemindTransport
from swarm.identity import load_or_create_identity, peer_id_of_key
from tests.integration.conftest import peer_config

pytestmark = pytest.mark.integration
FP = "ef" * 32


def _record(peer: str, round_: int, index: int = 0, *, swarm: str = "rlswarm", completions=None) -> RolloutRecord:
    if completions is None:
        completions = (Completion("<answer>7</answer>", (5, 6, 7), (-0.5, -0.25, -2.0), "stop", 1.0),
                       Completion("8", (9,), (-1.5,), "length"))
    return RolloutRecord(
        swarm=swarm, peer=peer, round=round_, policy_version=round_, created_at=1700000123.5,
        model=ModelInfo("tiny-qwen2", FP, 512), sampling=SamplingInfo(0.7, 0.9, 16),
        task=TaskRef("chain_sum", {"min_terms": 2, "max_terms": 3}, 42, index), prompt=f"What is {index}+2?",
        completions=completions)


SWARM3_CONFIG = {"poll_interval_s": 0.2, "fetch_timeout_s": 5}  # the conftest's swarm3 peers


def _cfg(initial_peers: list[str], **kw) -> SwarmConfig:
    return peer_config(initial_peers, **{**SWARM3_CONFIG, **kw})


def _rogue_publish(rogue: HivemindTransport, round_: int, data: bytes, **overrides) -> None:
    """Serve ``data`` from ``rogue`` and announce it under rogue's signed subkey (fields overridable)."""
    sha = sha256_hex(data)
    ann = Announcement(**{"peer": rogue.peer_id, "round": round_, "count": 1, "nbytes": len(data), "sha256": sha,
                          "policy_version": 0, "created_at": time.time(), **overrides})
    with rogue._served_lock:
        rogue._served[(round_, sha)] = data
    assert rogue._call(rogue._store(round_, encode_announcement(ann)), 10)


def test_every_peer_gathers_the_others_records(swarm3):
    _, peers = swarm3
    for i, p in enumerate(peers):
        p.publish(0, [_record(p.peer_id, 0, i), _record(p.peer_id, 0, i + 10)])
    for p in peers:
        got = p.gather([0], timeout=20.0, min_peers=2)
        others = [q for q in peers if q is not p]
        assert sorted(got.peers) == sorted(q.peer_id for q in others)
        expected = [_record(q.peer_id, 0, j) for k, q in enumerate(peers) if q is not p for j in (k, k + 10)]
        key = lambda r: (r.peer, r.task.index)  # noqa: E731
        assert sorted(got.records, key=key) == sorted(expected, key=key)
        assert got.drops == Counter()
        assert p.gather([0], timeout=0.0, min_peers=0).records == []  # each bundle once


def test_bundle_over_one_megabyte_round_trips(swarm3):
    _, (a, b, _) = swarm3
    rng = random.Random(0)
    # 8 records × 16 completions × 4096 tokens = 524288 tokens; random ids (9 bits of entropy in a uint16) and
    # random f16-exact logprobs (k/64, 10 bits in an f16) leave zstd ≈ 19 bits a token: ≈ 1.2 MB
    recs = [_record(a.peer_id, 1, i, completions=tuple(
        Completion(f"text {i}.{j}", tuple(rng.randrange(512) for _ in range(4096)),
                   tuple(-rng.randrange(1024) / 64 for _ in range(4096)), "length") for j in range(16)))
        for i in range(8)]
    nbytes = a.publish(1, recs)
    assert nbytes > 1 << 20
    got = b.gather([1], timeout=30.0, min_peers=1)
    assert got.drops == Counter() and [r.peer for r in got.records] == [a.peer_id] * 8
    assert sorted(got.records, key=lambda r: r.task.index) == recs


def test_hostile_bundles_are_dropped_and_good_records_still_arrive(swarm3):
    maddrs, (a, b, _) = swarm3
    rogue = HivemindTransport(cfg=_cfg(maddrs[:1]))
    try:
        rounds = [10, 11, 12, 13, 14, 15]
        for r in rounds:
            b.publish(r, [_record(b.peer_id, r)])
        _rogue_publish(rogue, 10, b"\x28\xb5\x2f\xfd garbage")  # zstd magic, then nonsense
        _rogue_publish(rogue, 11, b"x" * 100, nbytes=64 << 20)  # announces 64 MiB > 16 MiB cap: never fetched
        _rogue_publish(rogue, 12, encode_bundle([_record(b.peer_id, 12)]))  # a record in b's name
        _rogue_publish(rogue, 13, encode_bundle([_record(rogue.peer_id, 13)]), count=300)  # > 256 records quota
        _rogue_publish(rogue, 14, encode_bundle([_record(rogue.peer_id, 14)]), peer=b.peer_id)  # forged announcement
        oversized = encode_announcement(Announcement(rogue.peer_id, 15, 1, 10, "0" * 64, 0, time.time()))
        assert rogue._call(rogue._store(15, oversized + b"\x00" * 2000), 10)  # > 1 KiB value: refused unparsed
        got = a.gather(rounds, timeout=20.0, min_peers=2)
        assert sorted(got.records, key=lambda r: r.round) == [_record(b.peer_id, r) for r in rounds]
        assert got.drops == Counter({"zstd": 1, "too_large": 1, "forged": 2, "quota": 1, "bad_announcement": 1})
    finally:
        rogue.shutdown()


def test_peer_gone_after_announcing_does_not_stall_gather(swarm3):
    maddrs, (a, b, _) = swarm3
    doomed = HivemindTransport(cfg=_cfg(maddrs[:1]))
    doomed.publish(20, [_record(doomed.peer_id, 20)])
    doomed.shutdown()  # the announcement stays in the DHT; the bytes are gone
    b.publish(20, [_record(b.peer_id, 20)])
    timeout = 6.0
    start = time.monotonic()
    got = a.gather([20], timeout=timeout, min_peers=3)  # asks for one more peer than exists
    elapsed = time.monotonic() - start
    assert elapsed < timeout + 2.0
    assert [r.peer for r in got.records] == [b.peer_id]
    assert got.drops == Counter({"fetch_failed": 1})


def test_restart_with_same_identity_keeps_peer_id(swarm3, tmp_path):
    maddrs, (a, _, _) = swarm3
    path = str(tmp_path / "node.key")
    first = HivemindTransport(cfg=_cfg(maddrs[:1], identity_path=path))
    pid = first.peer_id
    key, created = load_or_create_identity(path)
    assert not created and peer_id_of_key(key) == pid
    assert all(m.endswith(f"/p2p/{pid}") for m in first.visible_maddrs())
    first.shutdown()
    second = HivemindTransport(cfg=_cfg(maddrs[:1], identity_path=path))
    try:
        assert second.peer_id == pid
        second.publish(30, [_record(pid, 30)])
        assert a.gather([30], timeout=20.0, min_peers=1).records == [_record(pid, 30)]
    finally:
        second.shutdown()


def test_unreachable_initial_peers_raise_one_line_error():
    dead = "/ip4/127.0.0.1/tcp/9/p2p/QmSBhXqZhkAD4odn9j88ZwbEy19mykMNw4CUrwtwt6dQ8V"  # discard port: refused
    start = time.monotonic()
    with pytest.raises(BootstrapUnreachable) as exc:
        HivemindTransport(cfg=_cfg([dead], ).model_copy(update={"startup_timeout_s": 10.0}))
    msg = str(exc.value)
    assert "\n" not in msg and dead in msg and "swarm bootstrap" in msg
    assert time.monotonic() - start < 10.0 + 15.0


def test_bootstrap_process_prints_addresses_and_stops_on_sigterm():
    code = ("from swarm.bootstrap import run_bootstrap; run_bootstrap(host_maddrs=['/ip4/127.0.0.1/tcp/0'], "
            "announce_maddrs=[], identity_path=None, startup_timeout_s=60, swarm_id='rlswarm')")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, cwd=Path(__file__).resolve().parents[2])
    try:
        header = proc.stdout.readline()
        assert header.startswith("bootstrap peer Qm") and header.endswith(
            " ready; pass one of these as --initial-peers:\n")
        maddr = proc.stdout.readline().strip()
        assert maddr.startswith("/ip4/127.0.0.1/tcp/") and maddr.endswith("/p2p/" + header.split()[2])
        joined = HivemindTransport(cfg=_cfg([maddr]))  # the printed line is usable as-is
        joined.shutdown()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
