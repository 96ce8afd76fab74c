"""`swarm local --samplers K`: the plan wires one learner and K samplers together before any process starts."""

from __future__ import annotations

import argparse

import pytest

from node.config import ConfigError
from ops.cli.local import SAMPLER_ROUNDS, _node_plan
from swarm.net.identity import load_or_create_identity, peer_id_of_key


def _args(tmp_path, **kw) -> argparse.Namespace:
    base = {"config": ["examples/heterorl/lab.yaml"], "nodes": 2, "samplers": 2, "rounds": None, "set": [],
            "out": str(tmp_path)}
    return argparse.Namespace(**{**base, **kw})


def test_samplers_follow_the_learner_of_the_plan(tmp_path):
    plan = _node_plan(_args(tmp_path))
    names = [name for name, *_ in plan]
    cfgs = [cfg for _, _, cfg, _ in plan]
    assert names == ["heterorl-learner", "heterorl-sampler-1", "heterorl-sampler-2"]
    assert [c.role for c in cfgs] == ["learner", "sampler", "sampler"]
    key_path = tmp_path / "heterorl-learner" / "identity.key"
    assert cfgs[0].swarm.identity_path == str(key_path)
    learner_id = peer_id_of_key(load_or_create_identity(key_path)[0])
    assert all(c.heterorl.follow == [learner_id] for c in cfgs[1:])
    assert all(c.eval.every == 0 and c.swarm.max_fetches_per_window == 0 for c in cfgs[1:])
    assert len({c.tasks.seed for c in cfgs}) == 3  # every node its own task stream
    assert all(c.swarm.start_with_peers == 2 for c in cfgs)
    again = _node_plan(_args(tmp_path, rounds=5))  # a second start (a resume) keeps the learner's identity
    assert again[1][2].heterorl.follow == [learner_id]
    # --rounds bounds the learner; its samplers run until it is done (swarm local then stops them)
    assert [c.rounds for _, _, c, _ in again] == [5, SAMPLER_ROUNDS, SAMPLER_ROUNDS]
    assert "--rounds" in again[0][3] and "--rounds" not in again[1][3]


def test_samplers_need_one_config_and_a_learner(tmp_path):
    with pytest.raises(ConfigError, match="--samplers"):
        _node_plan(_args(tmp_path, config=["examples/heterorl/lab.yaml"] * 2))
    with pytest.raises(ConfigError, match="--samplers"):
        _node_plan(_args(tmp_path, samplers=0))
    sampler_only = tmp_path / "s.yaml"
    sampler_only.write_text((open("examples/heterorl/lab.yaml").read()).replace("role: learner", "role: sampler"))
    with pytest.raises(ConfigError, match="learner to follow"):
        _node_plan(_args(tmp_path, samplers=None, nodes=2, config=[str(sampler_only)]))
