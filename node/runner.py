"""Run a node's rounds: the round function is chosen by the node's mode, never by flags inside a round."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from node.federated.round import run_federated_round
from node.round.loop import run_round
from swarm.health import TransportDied, TransportWatch

if TYPE_CHECKING:
    from node.node import Node

ROUND_FUNCTIONS: dict[str, Callable[[Node, int], dict[str, Any]]] = {
    "sapo": run_round,  # sample, share, train (node.round.loop)
    "federated": run_federated_round,  # private rounds, public steps, adapter averaging
}


def run(node: Node, rounds: int) -> list[dict[str, Any]]:
    """Run rounds start..rounds-1 (resuming after the last checkpointed round).

    Before every round the transport's processes are checked (swarm.health): a node whose DHT
    child or p2pd died stops with TransportDied instead of running rounds with no peers.
    """
    round_fn = ROUND_FUNCTIONS[node.mode]
    watch = TransportWatch(node.transport)
    out = []
    if node.next_round == 0 and node.cfg.eval.at_start and node.cfg.eval.every:
        node.eval_before = node.evaluate()
    for round_ in range(node.next_round, rounds):
        if problem := watch.problem():
            raise TransportDied(problem)
        out.append(round_fn(node, round_))
        node.next_round = round_ + 1
    return out
