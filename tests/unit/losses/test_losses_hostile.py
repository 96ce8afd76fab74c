"""A peer's claimed μ cannot blow up a node's loss, its IS metrics or its gradient.

Before: one valid bundle whose per-token sampling logprobs claimed −30 made a node log loss 4.39e7
and is_weight_max 4.85e8 (the gradient stayed normal only because the log-ratio clamp stops it past
e^20); a claim just under the clamp (π_θ/μ = e^19) gave each of the peer's tokens with A < 0 a
gradient weight of e^19 under `loss: grpo, ratio: behaviour`. Now grpo's dual clip (c = 3) caps
that weight, the metrics report the weights the loss can use, and the extremes are a count.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from losses import LossInputs, build_loss
from node.config import parse_config
from node.node import Node
from node.round.loop import run_round
from swarm.exchange.twin import InMemoryHub, InMemoryTransport
from tests.adversarial.hostile import honest_record

T = 6
ADV = [1.0, -1.0, -1.0]  # an own row, an own row, the peer's row (A < 0)


def _inputs(peer_log_ratio: float) -> LossInputs:
    """Three aligned rows of T tokens; on the peer's row (external) π_θ/μ = e^peer_log_ratio on every token."""
    logp = torch.full((3, T), -1.0, requires_grad=True)
    beh = torch.full((3, T), -1.0)
    beh[2] = -1.0 - peer_log_ratio
    return LossInputs(logp=logp, logp_old=logp.detach().clone(), logp_beh=beh, logp_beh_seq=torch.zeros(3),
                      beh_aligned=torch.ones(3, dtype=torch.bool), mask=torch.ones(3, T),
                      advantages=torch.tensor(ADV), group_ids=torch.zeros(3, dtype=torch.long),
                      is_external=torch.tensor([False, False, True]))


def _peer_grad(loss_fn, log_ratio: float) -> float:
    """The largest gradient weight on one of the peer's tokens: |∂L/∂log π_θ| · B · T (seq norm divides by both)."""
    inputs = _inputs(log_ratio)
    loss_fn(inputs).loss.backward()
    return float(inputs.logp.grad[2].abs().max()) * 3 * T


def test_a_peers_claimed_mu_cannot_weigh_its_tokens_above_the_dual_clip():
    grpo = build_loss("grpo")  # the default: ratio behaviour, dual_clip 3
    for log_ratio in (0.0, 0.5, 1.0, math.log(2.9), math.log(3.5), 5.0, 10.0, 19.0, 19.9, 25.0):
        assert _peer_grad(grpo, log_ratio) <= 3.0 + 1e-4, log_ratio  # before: e^19 ≈ 1.8e8 at 19
    assert abs(_peer_grad(grpo, math.log(2.0)) - 2.0) < 1e-4  # below the cap GRPO's gradient is unchanged
    unbounded = build_loss("grpo", dual_clip=None)  # GRPO's own unclipped side, for contrast
    assert _peer_grad(unbounded, 19.0) > 1e8


def test_the_logged_loss_and_is_weights_are_what_the_optimizer_could_use():
    out = build_loss("grpo")(_inputs(29.0))  # log μ = log π_θ − 29: beyond even the clamp
    m = out.metrics
    # own rows: r = 1 → ℓ = −A; the peer's row: capped at 3·|A|. seq norm: (−1 + 1 + 3) / 3
    assert abs(float(out.loss.detach()) - 1.0) < 1e-5  # before: ≈ e^20/3 ≈ 1.6e8
    assert m["is_weight_max"] == 3.0 and m["is_weight_mean"] <= 3.0  # before: 4.85e8
    assert m["is_weight_extreme"] == T  # the peer's tokens, counted
    assert m["kl_beh"] == 0.0 and m["kl_beh_external"] == 0.0  # estimated over the rest; before: ≈ 1.6e8, 4.9e8
    assert m["clip_frac"] == 1 / 3


def _victim(tmp_path, hub: InMemoryHub) -> Node:
    cfg = {
        "name": "victim", "seed": 0, "rounds": 10, "torch_threads": 1, "model": {"spec": "tiny-qwen2"},
        "tasks": {"datasets": [{"name": "chain_sum", "config": {"min_terms": 2, "max_terms": 2, "max_digits": 1}}],
                  "system_prompt": None, "eval_size": 0},
        "generation": {"prompts_per_round": 2, "group_size": 4, "max_new_tokens": 8},
        "select": {"local_groups": 2, "external_groups": 2, "drop_zero_advantage": False},
        "loss": {"name": "grpo", "ratio": "behaviour"},
        "swarm": {"enabled": True}, "eval": {"every": 0}, "checkpoint": {"every": 100},
        "metrics": {"console": False},
    }
    return Node(parse_config(cfg), tmp_path / "victim", transport=InMemoryTransport(hub, "victim"))


def test_a_node_that_trains_on_a_hostile_record_logs_a_sane_loss(tmp_path):
    """End to end: a valid record (a real task, ids that say its text, 2 right and 2 wrong answers) whose
    claimed logprobs are −30 per token is regenerated, verified, selected and trained on."""
    hub = InMemoryHub()
    node = _victim(tmp_path, hub)
    peer = InMemoryTransport(hub, "peer")
    try:
        rec = honest_record(node, node.tasks, index=7, peer="peer")
        rec = dataclasses.replace(rec, completions=tuple(
            dataclasses.replace(c, logprobs=(-30.0,) * len(c.logprobs)) for c in rec.completions))
        peer.publish([rec])
        m = run_round(node, 0).line()
    finally:
        node.close()
    assert m["groups_external"] == 1 and m["external_peers"] == ["peer"], m["drops"]
    assert math.isfinite(m["loss"]) and abs(m["loss"]) < 10, m["loss"]  # before: ≈ 1e7
    assert m["is_weight_max"] <= 3.0 and m["is_weight_mean"] <= 3.0, (m["is_weight_max"], m["is_weight_mean"])
    assert m["kl_beh"] < 100 and m["kl_beh_external"] < 100, (m["kl_beh"], m["kl_beh_external"])
    assert m["is_weight_extreme"] >= sum(len(c.token_ids) for c in rec.completions) // 2  # the peer's tokens
    assert math.isfinite(m["grad_norm"])
