"""One round of a federated node (FedAvg-GRPO, FedProx, PubSwap): the same steps as node.round.loop.

    1. tasks      private round: B items of this client's private set; public step k (PubSwap,
                  every τ_swap-th round): the B public prompts of step k, alike on every client;
                  k is our next step, or the newest step a peer published when that is ahead
    2. generate   G completions per prompt (K in the paper's notation)
    3. verify     our rewards and within-group advantages
    4. publish    public steps only: our responses go to the swarm; private rounds never leave the node
    5. receive    public steps only: peers' responses to step k (waits ≤ federated.public_wait_s)
    6. select     private: our informative groups; public: Balanced / Random groups (node.federated.pubswap)
    7–9. train    score, one step (FedProx adds μ/2·‖θ − θ_round‖²), sync
   10. average    every τ rounds: FedIT averaging of the LoRA adapters with whoever joins
   11. record     metrics line (public, pubswap_*, avg_*), eval and checkpoint when due
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from node.federated.mode import build_public_groups
from node.round.report import RoundOutcome, finish_round
from node.round.steps import publish, receive, sample, train
from node.round.train import build_optimizer

if TYPE_CHECKING:
    from node.round.record import RoundRecord
    from node.round.parts import RoundHost, RoundParts


def run_federated_round(node: RoundHost, round_: int) -> RoundRecord:
    started = time.perf_counter()
    parts = node.parts
    body = public_step if parts.federated.public_round(round_) else private_round
    out = body(parts, round_, started)  # 1–9
    out.extra.update(average(parts, round_, out.step.rows))  # 10
    return finish_round(parts, out)  # 11


def private_round(parts: RoundParts, round_: int, started: float) -> RoundOutcome:
    """B private items, our own groups only: nothing is published or gathered."""
    sampled = sample(parts, round_)  # 1, 2, 3
    selection = parts.selector.select(sampled.groups)  # 6
    step = train(parts, selection.groups, regularizer=parts.federated.proximal())  # 7, 8, 9
    return RoundOutcome(round_, started, sampled.groups, sampled.gen, selection, step, extra={"public": False})


def public_step(parts: RoundParts, round_: int, started: float) -> RoundOutcome:
    """Public step k: every client answers the same public prompts and trains on a Balanced/Random group."""
    fed, g = parts.federated, parts.cfg.generation
    early = receive(parts)  # 5a: peers' responses that arrived while we trained privately
    k = fed.public_step(newest_public_step(parts, early.groups))  # ours, or the swarm's if it is ahead
    sampled = sample(parts, k, parts.tasks.public(k, g.prompts_per_round))  # 1, 2, 3: groups carry the step index
    wire_bytes = publish(parts, k, sampled)  # 4
    missing = g.prompts_per_round * (fed.cfg.split.clients - 1) - sum(x.round == k for x in early.groups)
    gathered = early + receive(parts, max(0, missing), fed.cfg.public_wait_s)  # 5b: the others' answers to k
    selection, swap = build_public_groups(  # 6
        sampled.groups, gathered.groups, fed.cfg, own_id=parts.peer_id, round_=k, rng=parts.selector.rng,
        mode=parts.cfg.train.advantage, drop_zero_advantage=parts.cfg.select.drop_zero_advantage)
    for reason, n in swap.drops.items():
        gathered.drops[reason] = gathered.drops.get(reason, 0) + n
    step = train(parts, selection.groups, regularizer=fed.proximal())  # 7, 8, 9
    return RoundOutcome(round_, started, sampled.groups, sampled.gen, selection, step, wire_bytes=wire_bytes,
                        gathered=gathered, extra={"public": True, "public_step": k, **swap.metrics()})


def newest_public_step(parts: RoundParts, groups: list) -> int | None:
    """The newest public step a peer has published, among `groups` (None: none of them is public)."""
    steps = [x.round for x in groups if parts.tasks.is_public(x.task.ref)]
    return max(steps, default=None)


def average(parts: RoundParts, round_: int, rows: int) -> dict[str, Any]:
    """Every τ rounds: FedIT averaging; a changed adapter gets a fresh optimizer and a new version."""
    fed, policy = parts.federated, parts.policy
    fed.samples += rows
    if not fed.average_due(round_):
        return {}
    out = fed.average()
    if out["avg_averaged"]:
        policy.optimizer = build_optimizer(policy.model, parts.cfg.train)  # state reset, as the paper
        policy.version += 1
        parts.generator.sync_weights(policy.model, policy.version)
    return out
