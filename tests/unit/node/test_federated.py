"""Federated mode glue: config checks, the client/public task sets, public-step groups, FedProx and
the averaging boundary of a round (with a stand-in averager; real peers are in tests/integration)."""

from __future__ import annotations

import random

import pytest
import torch

from node.config import ConfigError, parse_config
from node.federated.config import FederatedConfig, SplitConfig
from node.federated.mode import Federated, FederatedTasks, build_public_groups
from node.round.groups import Group, advantages
from node.tasks.config import DatasetSpec, TaskConfig
from protocols.records import Completion
from swarm.weights.averaging import AverageResult

FAMILIES = [DatasetSpec(name="chain_sum", config={"min_terms": 2, "max_terms": 2, "min_digits": d, "max_digits": d})
            for d in (1, 2, 3)]


def base_config(**federated) -> dict:
    return {"model": {"spec": "tiny-qwen2", "lora": {"r": 2, "alpha": 4}},
            "tasks": {"datasets": [f.model_dump() for f in FAMILIES], "system_prompt": None, "eval_size": 4},
            "generation": {"prompts_per_round": 2, "group_size": 4, "max_new_tokens": 4},
            "select": {"drop_zero_advantage": False}, "eval": {"every": 0},
            "federated": {"tau": 2, "split": {"clients": 2, "private_size": 8, "public_size": 4}, **federated}}


def test_config_needs_lora_and_a_client_inside_the_split():
    data = base_config()
    del data["model"]["lora"]
    with pytest.raises(ConfigError, match="set model.lora"):
        parse_config(data)
    with pytest.raises(ConfigError, match="federated.split"):
        parse_config(base_config(split={"clients": 2, "client": 2}))
    with pytest.raises(ConfigError, match="average_timeout_s"):
        parse_config(base_config(average_timeout_s=3, matchmaking_time_s=5))
    assert parse_config(base_config(algorithm="pubswap")).federated.pubswap.rule == "balanced"


def _key(t):
    return t.ref.dataset, t.ref.seed, t.ref.index


def test_clients_share_public_prompts_and_held_out_set_but_not_private_items():
    clients = [FederatedTasks(TaskConfig(datasets=FAMILIES, seed=i, system_prompt=None, eval_size=6),
                              SplitConfig(clients=2, client=i, private_size=8, public_size=4)) for i in range(2)]
    a, b = clients
    assert [t.ref for t in a.public(5, 3)] == [t.ref for t in b.public(5, 3)]
    assert [t.ref for t in a.public(5, 3)] != [t.ref for t in a.public(7, 3)]  # another round, another draw
    assert [t.ref for t in a.eval_set()] == [t.ref for t in b.eval_set()]
    assert len(a.private) == len(b.private) == 8 and not {_key(t) for t in a.private} & {_key(t) for t in b.private}
    assert {_key(t) for r in range(10) for t in a.sample(r, 2)} <= {_key(t) for t in a.private}
    public = [t for r in range(20) for t in a.public(r, 2)]
    assert {_key(t) for t in public} <= {_key(t) for t in a.public_set} and len(a.public_set) == 4
    assert all(a.is_public(t.ref) for t in public) and not any(a.is_public(t.ref) for t in a.private)
    assert "this node is client 0" in a.describe() and "α=0.3" in a.describe()


def _group(task, rewards, source="self", aligned=True, round_=3):
    comps = [Completion(f"{source}{i}", (5, i + 1), (-0.5, -0.5), "stop") for i in range(len(rewards))]
    return Group(task, comps, rewards, advantages(rewards), source=source, aligned=aligned, round=round_)


def test_public_groups_balanced_drops_foreign_prompts_and_recomputes_advantages():
    tasks = FederatedTasks(TaskConfig(datasets=FAMILIES, system_prompt=None, eval_size=0),
                           SplitConfig(clients=2, private_size=8, public_size=4))
    t0, t1 = tasks.public(3, 2)
    private = tasks.sample(3, 1)[0]
    local = [_group(t0, [0.0, 0.0, 0.0, 0.0]), _group(t1, [1.0, 1.0, 1.0, 0.0])]
    received = [_group(t0, [1.0, 1.0, 1.0, 0.0], "peerA"),
                _group(t0, [1.0, 1.0, 1.0, 1.0], "peerB", aligned=False),  # another tokenizer: no donor
                _group(private, [1.0] * 4, "peerA"),  # not one of this round's public prompts
                _group(t0, [1.0] * 4, "peerA", round_=1)]  # a late group of an earlier public round
    cfg = FederatedConfig(algorithm="pubswap", split=SplitConfig(clients=2))
    sel, stats = build_public_groups(local, received, cfg, own_id="me", round_=3, rng=random.Random(0),
                                     mode="std", drop_zero_advantage=True)
    assert stats.drops == {"unaligned": 1, "not_public": 2}
    assert stats.metrics() == {"pubswap_peer_groups": 1, "pubswap_replaced": 2}
    g0, g1 = sel.groups
    # t0: c_n = 0, K = 4 ⇒ 2 of our wrong ones become peerA's right ones: rewards two 1s, two 0s
    assert sorted(g0.rewards) == [0.0, 0.0, 1.0, 1.0]
    assert sum(c.text.startswith("peerA") for c in g0.completions) == 2
    # A = (r − 0.5) / (0.5 + 1e-6) = ±0.999998
    assert sorted(g0.advantages) == pytest.approx([-0.999998, -0.999998, 0.999998, 0.999998], abs=1e-6)
    assert g1.completions == local[1].completions  # c_n = 3 ≥ 2: our own group unchanged


class MeanWithPeer:
    """Stand-in averager: one virtual peer holding `peer` tensors, weights as given."""

    def __init__(self, peer: list[torch.Tensor], peer_weight: float):
        self.peer, self.peer_weight, self.weights = peer, peer_weight, []

    def average(self, tensors, *, weight, timeout):
        self.weights.append(weight)
        with torch.no_grad():
            for t, p in zip(tensors, self.peer):
                t.copy_((weight * t + self.peer_weight * p) / (weight + self.peer_weight))
        return AverageResult(True, 2, 123, 0.5, 0.01)


@pytest.fixture()
def lora_model():
    from node.models.config import LoraSpec, ModelConfig
    from node.models.load import load_model

    return load_model(ModelConfig(spec="tiny-qwen2", lora=LoraSpec(r=2, alpha=4))).model


def test_fedprox_term_pulls_towards_the_round_anchor(lora_model):
    fed = Federated(FederatedConfig(algorithm="fedprox", prox_mu=0.5), lora_model, swarm_id="s")
    with torch.no_grad():
        for t in fed.tensors:
            t.add_(0.2)
    reg = fed.proximal()()
    n = sum(t.numel() for t in fed.tensors)
    assert reg.item() == pytest.approx(0.5 * 0.5 * n * 0.04, rel=1e-4)  # μ/2 · Σ 0.2²
    reg.backward()
    assert all(torch.allclose(t.grad, torch.full_like(t, 0.5 * 0.2)) for t in fed.tensors)  # μ·(θ − θ_round)
    assert Federated(FederatedConfig(algorithm="fedavg"), lora_model, swarm_id="s").proximal() is None


def test_a_round_on_the_boundary_averages_and_resets_the_optimizer(tmp_path):
    from node.federated.round import run_federated_round as run_round
    from node.node import Node

    cfg = parse_config(base_config(weight_by_samples=True))
    node = Node(cfg, tmp_path)
    try:
        peer = [torch.full_like(t, 0.25) for t in node.federated.tensors]
        node.federated.averager = MeanWithPeer(peer, 8.0)
        first = run_round(node, 0).line()
        assert first["public"] is False and first["wire_bytes"] == 0 and "avg_averaged" not in first
        optimizer, version = node.optimizer, node.policy_version
        before = [t.detach().clone() for t in node.federated.tensors]
        second = run_round(node, 1).line()  # τ = 2: the boundary
        assert second["avg_averaged"] is True and second["avg_group_size"] == 2 and second["avg_bytes"] == 123
        # samples since the last average: 2 rounds × 2 prompts × 4 completions = 16
        assert node.federated.averager.weights == [16.0] and second["avg_weight"] == 16.0
        assert node.optimizer is not optimizer and not node.optimizer.state  # fresh AdamW state
        assert node.policy_version == version + 2  # one optimizer step + the averaged adapter
        assert node.federated.samples == 0
        for t, a in zip(node.federated.tensors, node.federated.anchor):
            assert torch.equal(t, a)  # FedProx anchor = the averaged adapter
        assert any(not torch.equal(t, b) for t, b in zip(node.federated.tensors, before))
    finally:
        node.close()


def test_without_a_swarm_averaging_is_reported_not_done(tmp_path):
    from node.federated.round import run_federated_round as run_round
    from node.node import Node

    node = Node(parse_config(base_config(tau=1)), tmp_path)
    try:
        m = run_round(node, 0).line()
        assert m["avg_averaged"] is False and m["avg_error"] == "no swarm" and m["avg_group_size"] == 1
    finally:
        node.close()


@pytest.mark.parametrize("name,algorithm", [("fedavg", "fedavg"), ("fedprox", "fedprox"),
                                            ("pubswap-balanced", "pubswap"), ("pubswap-random", "pubswap")])
def test_federated_examples_are_four_client_lora_configs(name, algorithm):
    from pathlib import Path

    from node.config import load_config

    cfg = load_config(Path(__file__).resolve().parents[3] / "examples" / "federated" / f"{name}.yaml")
    assert cfg.federated.algorithm == algorithm and cfg.federated.split.clients == 4
    assert cfg.model.lora is not None and cfg.swarm.enabled and cfg.select.external_groups == 0
    if algorithm == "pubswap":
        assert cfg.federated.pubswap.rule == name.split("-")[1] and cfg.federated.pubswap.tau_swap == 2


def test_progress_line_reports_public_steps_and_averaging():
    from node.books.metrics import progress_line
    from node.round.record import RoundRecord

    base = dict(node="n", round=3, reward_mean=0.1, accuracy=0.1, groups_local=2, groups_external=0,
                tokens_per_s=5.0, round_s=1.0)
    def line(**mode):
        return progress_line(RoundRecord.from_line({**base, **mode}))
    assert line(public=True, avg_averaged=True, avg_group_size=4, avg_drift=0.5).endswith(
        "| public step | averaged with 3 peers, drift 0.500")
    assert line(avg_averaged=False, avg_group_size=1, avg_drift=None).endswith("| averaging failed")
    assert "averag" not in line() and "public" not in line()
