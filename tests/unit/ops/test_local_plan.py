"""`swarm local`'s plan: per-node configs, and metrics ports derived per node (base + i)."""

from __future__ import annotations

from argparse import Namespace

from ops.cli.local import _node_plan, _ports


def _plan(*sets: str, nodes: int = 3):
    return _ports(_node_plan(Namespace(config=["examples/tiny-swarm.yaml"], nodes=nodes, rounds=None,
                                       set=list(sets), out="runs/x")))


def test_metrics_ports_are_derived_per_node():
    plan = _plan("metrics.prometheus_port=9123")
    assert [cfg.metrics.prometheus_port for _, _, cfg, _ in plan] == [9123, 9124, 9125]
    for i, (_, _, _, extra) in enumerate(plan):  # the last --set wins over the user's shared one
        assert extra[-2:] == ["--set", f"metrics.prometheus_port={9123 + i}"]
    assert [cfg.metrics.prometheus_port for _, _, cfg, _ in _plan()] == [None] * 3
    assert [cfg.metrics.prometheus_port for _, _, cfg, _ in _plan("metrics.prometheus_port=0")] == [0] * 3


def test_the_solo_control_runs_node_0s_stream_alone_on_all_its_own_groups():
    plan = _node_plan(Namespace(config=["examples/lab-swarm.yaml"], nodes=2, rounds=5, set=["seed=7"], control=True, out="runs/x"))
    (n0, _, c0, _), (n1, _, c1, _), (solo, _, cs, extra) = plan
    assert (n0, n1, solo) == ("lab-0", "lab-1", "lab-solo")
    assert cs.swarm.enabled is False and c0.swarm.enabled is True
    assert (cs.seed, cs.tasks.seed) == (c0.seed, c0.tasks.seed) != (c1.seed, c1.tasks.seed)
    assert cs.generation.prompts_per_round == c0.generation.prompts_per_round
    assert (cs.select.local_groups, cs.select.external_groups) == (c0.select.local_groups + c0.select.external_groups, 0)
    assert cs.rounds == 5 and "--initial-peers" not in extra


def test_the_solo_control_refuses_a_learner_and_its_samplers():
    import pytest

    from node.config import ConfigError

    with pytest.raises(ConfigError, match="--control"):
        _node_plan(Namespace(config=["examples/heterorl/lab.yaml"], nodes=1, samplers=1, rounds=None, set=[], out="runs/x",
                             control=True))


def test_a_heterogeneous_pair_gets_one_solo_control_per_node():
    plan = _node_plan(Namespace(config=["examples/hetero/spell.yaml", "examples/hetero/spell-wide.yaml"], nodes=2,
                                rounds=4, set=[], control=True, out="runs/x"))
    names = [name for name, *_ in plan]
    assert names == ["spell", "spell-wide", "spell-solo", "spell-wide-solo"]
    (_, _, a, _), (_, _, b, _), (_, _, sa, _), (_, _, sb, _) = plan
    for node, solo in ((a, sa), (b, sb)):  # each control: its node's model, seed, task stream and generation, alone
        assert solo.swarm.enabled is False and node.swarm.enabled is True
        assert (solo.model.spec, solo.seed, solo.tasks.seed) == (node.model.spec, node.seed, node.tasks.seed)
        assert solo.generation.prompts_per_round == node.generation.prompts_per_round
        assert solo.select.external_groups == 0
    assert sa.model.spec != sb.model.spec
