"""Run a node's rounds: the round function is chosen by the node's mode, never by flags inside a round."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from node.federated.round import run_federated_round
from node.heterorl.learner import run_learner_round
from node.heterorl.sampler import run_sampler_round
from node.heterorl.state import role_state
from node.round.loop import run_round
from swarm.host.health import TransportDied, TransportWatch

if TYPE_CHECKING:
    from node.node import Node
    from node.round.record import RoundRecord

ROUND_FUNCTIONS: dict[str, Callable[[Node, int], RoundRecord]] = {
    "sapo": run_round,  # sample, share, train (node.round.loop)
    "federated": run_federated_round,  # private rounds, public steps, adapter averaging
    "sampler": run_sampler_round,  # HeteroRL: generate with a learner's weights, publish, never train
    "learner": run_learner_round,  # HeteroRL: train on samplers' rollouts, broadcast weights
}


def run(node: Node, rounds: int) -> list[RoundRecord]:
    """Run rounds start..rounds-1 (resuming after the last checkpointed round).

    Before every round the transport's processes are checked (swarm.host.health): a node whose DHT
    child or p2pd died stops with TransportDied instead of running rounds with no peers.
    """
    round_fn = ROUND_FUNCTIONS[node.mode]
    if node.cfg.role != "full":
        role_state(node)  # a sampler or learner without a swarm stops here, before any work
    watch = TransportWatch(node.transport)
    meet_peers(node)
    out = []
    if node.next_round == 0 and node.cfg.eval.at_start and node.cfg.eval.every:
        before = node.evaluate_items()
        node.eval_before, node.eval_before_se = before.accuracy, before.se
        node.eval_before_items = before
    for round_ in range(node.next_round, rounds):
        if problem := watch.problem():
            raise TransportDied(problem)
        out.append(round_fn(node, round_))
        node.next_round = round_ + 1
    return out


def meet_peers(node: Node) -> int:
    """Announce ourselves (an empty bundle) and, if swarm.start_with_peers asks, wait until that many
    peers were seen (at most swarm.start_wait_s). Returns the peers seen. This only lets a local
    experiment start together: the peers met here are vouched for (in good standing as if they had
    delivered, swarm.exchange.standing), so the first rounds may wait for their groups (swarm.wait_s) until
    one of them fails; otherwise only peers whose groups were used are ever waited for."""
    sw = node.cfg.swarm
    if node.transport is None:
        return 0
    node.transport.publish([])
    deadline = time.monotonic() + sw.start_wait_s
    while node.transport.peers_seen() < sw.start_with_peers and time.monotonic() < deadline:
        time.sleep(0.2)
    if sw.start_with_peers:
        node.transport.vouch(sw.start_with_peers)
    return node.transport.peers_seen()
