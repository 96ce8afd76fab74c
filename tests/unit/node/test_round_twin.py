"""Two real nodes (tiny-qwen2) run `run_round` in one process, exchanging through the in-memory hub.

The whole round is exercised — generate, verify, publish, gather, ingest (regenerate and re-verify),
SAPO selection, scoring, one optimizer step — with the transport's real encode/vet/decode path
and no network, in a few seconds.
"""

from __future__ import annotations

from node.config import parse_config
from node.node import Node
from swarm.exchange.twin import InMemoryHub, InMemoryTransport
from node.round.loop import run_round
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


def test_metrics_count_compute_and_break_held_out_accuracy_down_by_task_kind(tmp_path):
    cfg = _config("solo", 0)
    one, two = {"min_terms": 2, "max_terms": 2, "max_digits": 1}, {"min_terms": 3, "max_terms": 3, "max_digits": 1}
    cfg["tasks"].update(eval_size=6, reward="exact",
                        eval_datasets=[{"name": "chain_sum", "config": one}, {"name": "chain_sum", "config": two}])
    cfg["eval"] = {"every": 1, "samples": 2}
    cfg["swarm"] = {"enabled": False}
    node = Node(parse_config(cfg), tmp_path / "solo")
    try:
        m = run_round(node, 0).line()
    finally:
        node.close()
    by = m["eval_accuracy_by_task"]
    assert sorted(by) == ["chain_sum[max_digits=1,max_terms=2,min_terms=2]", "chain_sum[max_digits=1,max_terms=3,min_terms=3]"]
    assert abs(sum(by.values()) / 2 - m["eval_accuracy"]) < 1e-9  # 3 items per kind
    assert m["tokens_generated"] > 0 and m["tokens_trained"] <= m["tokens_generated"]
    assert 0 <= m["groups_informative"] <= 2 and m["groups_received_informative"] == 0
    assert m["reward_mean"] in (0.0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0)  # exact: rewards are 0 or 1


def test_a_node_that_imitates_peers_reports_the_share_of_their_rows_it_pushed_up(tmp_path):
    """`train.imitate` reaches the loss of a real round: on the rounds that trained on the peer's groups, the
    share of the peer's rows imitated is reported (0 here: the untrained tiny model's rewards are equal within
    a group; the term's effect on a step is tests/unit/node/test_imitation.py's), and a node without it reports none."""
    hub = InMemoryHub()
    cfgs = [_config(f"n{i}", i) for i in range(2)]
    cfgs[0]["train"] = {"imitate": 1.0}
    nodes = [Node(parse_config(c), tmp_path / c["name"],
                  transport=InMemoryTransport(hub, f"peer-{i}", poll_interval_s=0.01)) for i, c in enumerate(cfgs)]
    results = run_concurrently(nodes, 3, timeout_s=120)
    with_peers = [m for m in results[0] if m["groups_external"] > 0]
    assert with_peers, results[0]
    shares = [m["imitation_share_external"] for m in with_peers]
    assert all(0.0 <= s <= 1.0 for s in shares), shares
    assert not any("imitation_share_external" in m for m in results[1])
