"""A learner and two samplers (tiny-qwen2) run their round functions in one process on the in-memory hub.

The whole HeteroRL loop with the real encode/vet/decode path and no network: samplers load the
learner's newest weights and tag their records with that version; the learner bounds staleness in
its own steps and counts what it drops; a sampler whose learner is gone keeps its last weights; a
learner restarted from its checkpoint is followed again.
"""

from __future__ import annotations

from pathlib import Path

import torch

from node.config import parse_config
from node.heterorl.sampler import sample_round
from node.node import Node
from node.runner import ROUND_FUNCTIONS
from swarm.exchange.twin import InMemoryHub, InMemoryTransport

LEARNER = "QmLearner" + "x" * 30
SAMPLERS = ["QmSamplerA" + "y" * 30, "QmSamplerB" + "z" * 30]


ROOT = Path(__file__).resolve().parents[3]
# a random model answers no sum right; a reward it can earn gives nonzero advantages, so every step
# changes the weights (a zero-gradient step only relabels them: test_heterorl_parts)
REWARD = "def parity(prompts, completions, **kwargs):\n    return [float(len(c) % 2) for c in completions]\n"


def _config(tmp: Path, name: str, seed: int, role: str, **extra) -> dict:
    (tmp / "reward.py").write_text(REWARD)
    cfg = {
        "name": name, "seed": seed, "rounds": 100, "torch_threads": 1, "role": role,
        "model": {"spec": "tiny-qwen2"},
        "tasks": {"datasets": [{"file": str(ROOT / "examples/byo/arithmetic.jsonl"), "reward": f"{tmp}/reward.py:parity"}],
                  "system_prompt": None, "eval_size": 0, "seed": seed},
        "generation": {"prompts_per_round": 2, "group_size": 4, "max_new_tokens": 8},
        "select": {"local_groups": 0, "external_groups": 4, "drop_zero_advantage": False},
        "train": {"lr": 1e-3},
        "swarm": {"enabled": True},
        "eval": {"every": 0}, "checkpoint": {"every": 1},
        "metrics": {"console": False},
    }
    for key, value in extra.items():
        section, _, field = key.partition("__")
        cfg.setdefault(section, {})[field] = value
    return cfg


def _node(hub, tmp_path, name, peer, seed, role, **extra) -> Node:
    return Node(parse_config(_config(tmp_path, name, seed, role, **extra)), tmp_path / name,
                transport=InMemoryTransport(hub, peer, poll_interval_s=0.01))


def _round(node: Node, r: int) -> dict:
    return ROUND_FUNCTIONS[node.mode](node, r).line()


def test_learner_and_samplers(tmp_path):
    hub = InMemoryHub()
    learner = _node(hub, tmp_path, "learner", LEARNER, 0, "learner", heterorl__wait_s=0, ingest__max_delay_steps=1)
    samplers = [_node(hub, tmp_path, f"s{i}", peer, 10 + i, "sampler", heterorl__follow=[LEARNER])
                for i, peer in enumerate(SAMPLERS)]
    nodes = [learner, *samplers]
    try:
        assert [n.mode for n in nodes] == ["learner", "sampler", "sampler"]
        lm, sm = [], [[], []]
        for r in range(4):
            for i, s in enumerate(samplers):
                sm[i].append(_round(s, r))
            lm.append(_round(learner, r))
        # the samplers load every new version (none was announced before the learner's first round)
        # and tag their records with it
        for rows in sm:
            assert [m["weights_version"] for m in rows] == [0, 1, 2, 3], rows
            assert [m["weights_loaded"] for m in rows] == [False, True, True, True]
            assert all(m["rows_trained"] == 0 and m["policy_version"] == k for k, m in enumerate(rows))
        assert [m["policy_version"] for m in lm] == [1, 2, 3, 4]
        assert all(m["groups_external"] == 4 and m["staleness_max"] == 0 for m in lm), lm
        # sampler 0 now holds exactly the learner's v4; sampler 1 lags: it keeps sampling with v3
        _round(samplers[0], 4)
        for a, b in zip(learner.model.state_dict().values(), samplers[0].model.state_dict().values()):
            assert torch.equal(a, b)
        sample_round(samplers[1], 4, 0.0, {})
        m = _round(learner, 4)  # v4: sampler 1's v3 records are 1 step old, within max_delay_steps
        assert "stale_version" not in m["drops"] and m["staleness_counts"] == {"0": 2, "1": 2}, m
        sample_round(samplers[1], 5, 0.0, {})  # still v3, the learner is at v5: 2 steps > 1
        m = _round(learner, 5)
        assert m["drops"]["stale_version"] == 2, m["drops"]  # its two groups, counted
        assert m["rows_trained"] == 0
        # the learner is gone (its v5 announcement stays, its bytes do not): samplers keep sampling with
        # their last weights, and count the failed fetch of v5 once (retried only after retry_s)
        versions = [s.policy_version for s in samplers]
        learner.close()
        for r in (6, 7):
            for s in samplers:
                m = _round(s, r)
                assert m["weights_loaded"] is False and m["rows_trained"] == 0
                assert m["drops"] == ({"weights_fetch_failed": 1} if r == 6 else {}), m["drops"]
        assert [s.policy_version for s in samplers] == versions == [4, 3]
        # restarted from its checkpoint, with the same id: the samplers follow its next version
        learner = _node(hub, tmp_path, "learner", LEARNER, 0, "learner", heterorl__wait_s=0,
                        ingest__max_delay_steps=1)
        nodes[0] = learner
        assert learner.policy_version == 5 and learner.next_round == 6  # round 5 trained nothing
        m = _round(samplers[0], 8)
        assert m["weights_loaded"] is False  # nothing new announced yet
        m = _round(learner, 6)  # announces v5 again, trains on what is fresh enough → v6, announces v6
        assert m["policy_version"] == 6 and m["weights_published"] == 6
        for s in samplers:
            m = _round(s, 9)
            assert m["weights_loaded"] and m["weights_version"] == 6, m
    finally:
        for n in nodes:
            n.close()
