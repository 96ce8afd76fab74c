"""Two real nodes (tiny-qwen2) run `run_round` in one process, exchanging through the in-memory hub.

The whole round is exercised — generate, verify, publish, gather, ingest (regenerate and re-verify),
SAPO selection, scoring, one optimizer step — with the transport's real encode/vet/decode path
and no network, in a few seconds.
"""

from __future__ import annotations

from node.config import parse_config
from node.node import Node
from swarm.memory import InMemoryHub, InMemoryTransport
from tests.memory_swarm import run_concurrently


def _config(name: str, seed: int) -> dict:
    return {
        "name": name, "seed": seed, "rounds": 3, "torch_threads": 1,
        "model": {"spec": "tiny-qwen2"},
        "tasks": {"datasets": [{"name": "chain_sum", "config": {"min_terms": 2, "max_terms": 2, "max_digits": 1}}],
                  "system_prompt": None, "eval_size": 0, "seed": seed},
        "generation": {"prompts_per_round": 2, "group_size": 4, "max_new_tokens": 8},
        "select": {"local_groups": 2, "external_groups": 2, "drop_zero_advantage": False},
        "swarm": {"enabled": True, "wait_s": 20},  # once the other node is seen, wait for its groups
        "eval": {"every": 0}, "checkpoint": {"every": 100},
        "metrics": {"console": False},
    }


def test_two_nodes_train_on_each_others_groups(tmp_path):
    hub = InMemoryHub()
    nodes = [Node(parse_config(_config(f"n{i}", i)), tmp_path / f"n{i}",
                  transport=InMemoryTransport(hub, f"peer-{i}", poll_interval_s=0.01)) for i in range(2)]
    results = run_concurrently(nodes, 3, timeout_s=120)
    for i, other in ((0, "peer-1"), (1, "peer-0")):
        rows = results[i]
        assert [m["round"] for m in rows] == [0, 1, 2]
        assert sum(m["groups_external"] for m in rows) > 0, rows  # trained on the other node's groups
        assert {p for m in rows for p in m["external_peers"]} == {other}
        assert all(m["rows_trained"] > 0 and m["policy_version"] == k + 1 for k, m in enumerate(rows))
        assert all(m["wire_bytes"] > 0 for m in rows)
