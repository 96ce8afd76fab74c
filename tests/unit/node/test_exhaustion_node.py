"""The node-side bounds against one hostile peer (docs/ARCHITECTURE.md §4): each failed before its bound existed.

  duplicates    the same group from two peers (or our own sent back) was trained on twice
  metrics       a 4 M-character model name became a 24 MiB metrics line; every peer ever seen kept five
                Prometheus series and a dashboard row
  resume        a kill between a round's metrics line and its checkpoint left that round's line twice
  dashboard     any Host header was answered (DNS rebinding); `*_token`, `private_key`, `access_key` showed
  weights       a weight announcement once dated too far ahead was never looked at again; one ready and
                one fetched were compared by their raw dates
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

from node.books.metrics import (
    MAX_LINE_BYTES,
    MAX_PEER_SERIES,
    MAX_PEER_STATS,
    OTHER_PEERS,
    MetricsConfig,
    MetricsLog,
    Prom,
    bounded_line,
    bounded_peer_stats,
)
from node.round.config import IngestConfig
from node.round.dedup import SeenGroups, group_digest
from node.round.ingest import ingest
from node.round.steps import verdicts
from node.round.record import RoundRecord
from ops.dashboard.server import host_allowed
from ops.dashboard.state import MAX_PEER_ROWS, SECRET_KEY, peer_rows
from swarm.weights.channel import WeightBook, WeightLimits, make_weight_announcement
from tests.adversarial.hostile import honest_record, task_source

L1 = "QmTrainerA" + "a" * 30


# -- duplicates --------------------------------------------------------------------------------------------

def test_a_group_relayed_by_another_peer_or_sent_back_is_trained_once(tiny_qwen):
    tasks = task_source()
    seen = SeenGroups(horizon_s=600)
    original = honest_record(tiny_qwen, tasks, index=3, peer="producer")
    relayed = dataclasses.replace(original, peer="relay",  # the same group, completions in another order
                                  completions=tuple(reversed(original.completions)))

    def run(records):
        return ingest(records, tasks=tasks, cfg=IngestConfig(), own_fingerprint=tiny_qwen.fingerprint,
                      own_vocab_size=tiny_qwen.vocab_size, seen=seen)
    first = run([original])
    again = run([relayed])
    assert len(first.groups) == 1 and again.groups == [] and again.drops == Counter({"duplicate": 1})
    # a duplicate judges its sender neither way: in a race the relayed copy may simply come first
    assert verdicts([relayed], again.groups, again.peer_drops) == {"relay": (0, 0)}
    ours = honest_record(tiny_qwen, tasks, index=4, peer="me")
    seen.add(group_digest(ours.task, (c.text for c in ours.completions)), ours.created_at)  # published by us
    assert run([dataclasses.replace(ours, peer="echo")]).drops == Counter({"duplicate": 1})
    assert len(run([honest_record(tiny_qwen, tasks, index=5, peer="relay")]).groups) == 1  # new groups pass


def test_the_seen_book_is_bounded():
    seen = SeenGroups(horizon_s=10, max_seen=100)
    for k in range(1000):
        seen.add(k.to_bytes(16, "big"), float(k) / 100)
    assert len(seen) == 100
    seen.add(b"x" * 16, 1000.0)
    assert len(seen) == 1  # everything older than the horizon went


# -- metrics -----------------------------------------------------------------------------------------------

def _stats(n: int) -> dict:
    return {f"peer{k:05d}": {"model": "m", "received": k % 3, "used": k % 2, "dropped": {"schema": 1}}
            for k in range(n)}


def test_a_metrics_line_keeps_the_most_active_peers_and_sums_the_rest():
    out = bounded_peer_stats(_stats(1000))
    assert len(out) == MAX_PEER_STATS + 1 and out[OTHER_PEERS]["peers"] == 1000 - MAX_PEER_STATS
    assert sum(v["dropped"].get("schema", 0) for v in out.values()) == 1000  # nothing lost from the sums
    assert all(v["used"] == 1 for k, v in out.items() if k != OTHER_PEERS)


def test_no_metrics_line_is_longer_than_its_bound(tmp_path):
    log = MetricsLog(tmp_path, "n", MetricsConfig(console=False))
    m = {"node": "n", "round": 0, "time": 1.0, "reward_mean": 0.5, "accuracy": 0.5, "tokens_per_s": 1.0,
         "step_s": 0.1, "round_s": 0.2, "peer_stats": {"p": {"model": "N" * (4 << 20), "received": 1,
                                                            "dropped": {}, "used": 0}},
         "note": "x" * (1 << 20)}
    log.write(RoundRecord.from_line(m))
    line = (tmp_path / "metrics.jsonl").read_text()
    assert len(line.encode()) <= MAX_LINE_BYTES + 1  # before: 24 MiB for one name of 4 M characters
    row = json.loads(line)
    assert row["round"] == 0 and row["reward_mean"] == 0.5 and "truncated" in row
    assert len(bounded_line({"round": 1, **{f"k{i}": "y" * 5000 for i in range(100)}}).encode()) <= MAX_LINE_BYTES


def test_prometheus_keeps_series_for_a_bounded_number_of_peers():
    prom = Prom("n")
    for r in range(40):  # 1,000 identities, 25 a round
        stats = {f"id{r}-{k}": {"model": "x", "received": 1, "used": 0, "dropped": {"schema": 1}} for k in range(25)}
        prom._observe_plot(RoundRecord(time=float(r)), stats)
    peers = {s.labels["peer"] for m in prom.registry.collect() for s in m.samples if "peer" in s.labels}
    assert len(peers) <= MAX_PEER_SERIES, len(peers)  # before: 1,000 peers × 5 series


def test_a_resumed_run_keeps_one_line_per_round(tmp_path):
    log = MetricsLog(tmp_path, "n", MetricsConfig(console=False))
    for r in range(4):
        log.write(RoundRecord.from_line({"node": "n", "round": r, "time": 1.0, "tokens_per_s": 1.0, "step_s": 0.1,
                                          "round_s": 0.1}))
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"node": "n", "round": 4, "ti')  # cut short by kill -9
    MetricsLog(tmp_path, "n", MetricsConfig(console=False)).mark_resumed("round-00000001", next_round=2)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["round"] for m in rows] == [0, 1]  # rounds 2 and 3 will run again; the cut line is gone


# -- dashboard ---------------------------------------------------------------------------------------------

def test_the_dashboard_lists_a_bounded_number_of_peers():
    rows = [RoundRecord.from_line({"round": r, "time": float(r), "peer_stats": {
        f"id{r}": {"model": "", "received": 1, "used": 0, "dropped": {}}}}) for r in range(500)]
    out = peer_rows("n", rows, {})
    assert len(out) == MAX_PEER_ROWS and out[0]["peer"] == "id499"  # the most recently seen


def test_the_dashboard_answers_only_addresses_and_localhost():
    for host in ("127.0.0.1:8050", "localhost:8050", "[::1]:8050", "10.0.0.5", "LOCALHOST"):
        assert host_allowed(host), host
    for host in ("attacker.example:8050", "rebind.attacker.example", "", "127.0.0.1.nip.io:8050"):
        assert not host_allowed(host), host
    assert host_allowed("node.lan:8050", frozenset({"node.lan"}))


def test_secret_looking_config_keys_are_hidden():
    for key in ("hf_token", "HF_TOKEN", "auth_token", "wandb_api_key", "access_key", "aws_access_key_id",
                "private_key", "secret", "password", "identity_path"):
        assert SECRET_KEY.search(key), key
    for key in ("max_new_tokens", "max_tokens", "tokenizer", "max_entries_per_key", "max_completion_tokens"):
        assert not SECRET_KEY.search(key), key


# -- weights -----------------------------------------------------------------------------------------------

def test_a_weight_announcement_from_the_future_is_looked_at_again_once_it_is_not():
    book = WeightBook([L1], "full", WeightLimits(max_clock_skew_s=120.0, retry_s=10.0))
    ann, value = make_weight_announcement(L1, 1, b"v1", "full", now=1000.0)
    assert book.offer(L1, L1, value, now=500.0) is None  # 500 s ahead: dropped
    assert book.offer(L1, L1, value, now=600.0) is None  # still ahead: not counted again
    assert book.offer(L1, L1, value, now=900.0) == ann  # before: the verdict stood for good
    assert book.take_drops() == {"future_timestamp": 1}


def test_a_fetched_version_is_compared_by_when_it_was_first_seen():
    book = WeightBook([L1], "full", WeightLimits(max_clock_skew_s=120.0, retry_s=10.0))
    fast, fast_value = make_weight_announcement(L1, 1, b"fast", "full", now=100.0)  # the learner's clock ran 90 s fast
    assert book.offer(L1, L1, fast_value, now=10.0) == fast
    assert book.settle(fast, b"fast", now=11.0)
    newer, newer_value = make_weight_announcement(L1, 2, b"newer", "full", now=20.0)  # its clock put right
    assert book.offer(L1, L1, newer_value, now=20.0) == newer
    assert book.settle(newer, b"newer", now=21.0)
    assert book.take().version == 2  # before: v1 (dated 100) stayed ready and v2's bytes were thrown away
