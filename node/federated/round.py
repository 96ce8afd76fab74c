"""One round of a federated node (FedAvg-GRPO, FedProx, PubSwap): the same steps as node.round.loop.

    1. tasks      private round: B items of this client's private set; public step (PubSwap,
                  every τ_swap-th round): the B public prompts every client draws alike
    2. generate   G completions per prompt (K in the paper's notation)
    3. verify     our rewards and within-group advantages
    4. publish    public steps only: our responses go to the swarm; private rounds never leave the node
    5. gather     public steps only: peers' responses to the same public prompts
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
from node.round.steps import Gathered, gather, publish, train, verify
from node.round.train import build_optimizer

if TYPE_CHECKING:
    from node.node import Node


def run_federated_round(node: Node, round_: int) -> dict[str, Any]:
    started = time.perf_counter()
    fed, g = node.federated, node.cfg.generation
    public = fed.public_round(round_)
    tasks = node.tasks.public(round_, g.prompts_per_round) if public else node.tasks.sample(round_, g.prompts_per_round)  # 1
    prompts = [node.prompt_of(t) for t in tasks]
    gen = node.generator.generate(prompts, n=g.group_size)  # 2
    local = verify(node, tasks, gen, round_)  # 3
    extra: dict[str, Any] = {"public": public}
    if public:
        wire_bytes = publish(node, round_, local, prompts)  # 4
        gathered = gather(node, round_)  # 5
        selection, swap = build_public_groups(  # 6
            local, gathered.groups, fed.cfg, own_id=node.peer_id, round_=round_, rng=node.selector.rng,
            mode=node.cfg.train.advantage, drop_zero_advantage=node.cfg.select.drop_zero_advantage)
        for reason, n in swap.drops.items():
            gathered.drops[reason] = gathered.drops.get(reason, 0) + n
        extra.update(swap.metrics())
    else:
        wire_bytes, gathered = 0, Gathered()
        selection = node.selector.select(local)  # 6
    step = train(node, selection.groups, regularizer=fed.proximal())  # 7, 8, 9
    extra.update(average(node, round_, step.rows))  # 10
    return finish_round(node, RoundOutcome(round_, started, local, gen, selection, step,  # 11
                                           wire_bytes=wire_bytes, gathered=gathered, extra=extra))


def average(node: Node, round_: int, rows: int) -> dict[str, Any]:
    """Every τ rounds: FedIT averaging; a changed adapter gets a fresh optimizer and a new version."""
    fed = node.federated
    fed.samples += rows
    if not fed.average_due(round_):
        return {}
    out = fed.average()
    if out["avg_averaged"]:
        node.optimizer = build_optimizer(node.model, node.cfg.train)  # state reset, as the paper
        node.policy_version += 1
        node.generator.sync_weights(node.model, node.policy_version)
    return out
