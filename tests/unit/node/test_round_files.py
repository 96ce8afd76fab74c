"""A swarm on a dataset file of the user's own: the shipped example (examples/byo/) for three rounds.

Three real nodes (tiny-qwen2) run `run_round` in one process on the in-memory hub. Nodes 0 and 1
each read their *own copy* of examples/byo/arithmetic.jsonl and score with examples/byo/reward.py;
each trains on the other's groups, regenerated from its own copy by (content hash, row index).
Node 2 holds a copy with one row changed: its records and the others' are dropped both ways as
`dataset_mismatch`, counted in the metrics.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from node.config import parse_config
from node.node import Node
from swarm.exchange.twin import InMemoryHub, InMemoryTransport
from tests.memory_swarm import run_concurrently

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "byo"
ROUNDS = 3


def _config(name: str, seed: int, data: Path) -> dict:
    return {
        "name": name, "seed": seed, "rounds": ROUNDS, "torch_threads": 1,
        "model": {"spec": "tiny-qwen2"},
        "tasks": {"datasets": [{"file": str(data), "name": "arithmetic", "holdout": 8,
                                "reward": [f"{EXAMPLES / 'reward.py'}:exact_answer", f"{EXAMPLES / 'reward.py'}:answer_tag"],
                                "reward_weights": [1.0, 0.1]}],
                  "system_prompt": None, "eval_size": 4, "seed": seed},
        "generation": {"prompts_per_round": 2, "group_size": 4, "max_new_tokens": 8},
        "select": {"local_groups": 2, "external_groups": 4, "drop_zero_advantage": False},
        "swarm": {"enabled": True, "wait_s": 30, "start_with_peers": 2},  # start together, then no lockstep
        "eval": {"every": ROUNDS, "at_start": False}, "checkpoint": {"every": 100},
        "metrics": {"console": False},
    }


def test_two_nodes_train_on_each_others_file_tasks_and_a_third_file_is_dropped(tmp_path):
    copies = []
    for i in range(3):
        (tmp_path / f"data{i}").mkdir()
        copies.append(shutil.copy(EXAMPLES / "arithmetic.jsonl", tmp_path / f"data{i}" / "arithmetic.jsonl"))
    lines = Path(copies[2]).read_text().splitlines()
    lines[0] = lines[0].replace('"answer": "', '"answer": "1')  # one row differs: another file
    Path(copies[2]).write_text("\n".join(lines) + "\n")

    hub = InMemoryHub()
    nodes = [Node(parse_config(_config(f"n{i}", i, Path(copies[i]))), tmp_path / f"n{i}",
                  transport=InMemoryTransport(hub, f"peer-{i}", poll_interval_s=0.01)) for i in range(3)]
    results = run_concurrently(nodes, ROUNDS)
    for i, other in ((0, "peer-1"), (1, "peer-0")):
        rows = results[i]
        assert [m["round"] for m in rows] == list(range(ROUNDS))
        assert sum(m["groups_external"] for m in rows) > 0, rows  # trained on the other node's groups
        assert {p for m in rows for p in m["external_peers"]} == {other}
        assert all(m["policy_version"] == k + 1 for k, m in enumerate(rows))
        # the third node's records (2 a round) are regenerated from our own file: another hash, dropped
        assert sum(m["drops"].get("dataset_mismatch", 0) for m in rows) >= 2, [m["drops"] for m in rows]
        assert rows[-1]["eval_accuracy"] is not None
    third = results[2]
    assert all(m["groups_external"] == 0 for m in third)
    assert sum(m["drops"].get("dataset_mismatch", 0) for m in third) >= 4, [m["drops"] for m in third]
    # once every record of a peer was dropped, that peer is backed off: its next bundles are not even fetched
    assert set().union(*(m["drops"] for m in third)) <= {"dataset_mismatch", "backoff"}
    assert nodes[0].tasks.files.by_name["arithmetic"].sha256 != nodes[2].tasks.files.by_name["arithmetic"].sha256
    # held-out: exact matches and the mean verifier score per item (partial credit: the answer tag's 0.1)
    ev = nodes[0].last_eval
    assert len(ev.per_item_score) == len(ev.per_item) == 4
    assert all(s >= a for s, a in zip(ev.per_item_score, ev.per_item)) and ev.score >= ev.accuracy
