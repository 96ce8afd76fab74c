"""`swarm local`'s plan: per-node configs, and metrics ports derived per node (base + i)."""

from __future__ import annotations

from argparse import Namespace

from node.cli.local import _node_plan, _ports


def _plan(*sets: str, nodes: int = 3):
    return _ports(_node_plan(Namespace(config=["examples/tiny-swarm.yaml"], nodes=nodes, rounds=None,
                                       set=list(sets))))


def test_metrics_ports_are_derived_per_node():
    plan = _plan("metrics.prometheus_port=9123")
    assert [cfg.metrics.prometheus_port for _, _, cfg, _ in plan] == [9123, 9124, 9125]
    for i, (_, _, _, extra) in enumerate(plan):  # the last --set wins over the user's shared one
        assert extra[-2:] == ["--set", f"metrics.prometheus_port={9123 + i}"]
    assert [cfg.metrics.prometheus_port for _, _, cfg, _ in _plan()] == [None] * 3
    assert [cfg.metrics.prometheus_port for _, _, cfg, _ in _plan("metrics.prometheus_port=0")] == [0] * 3
