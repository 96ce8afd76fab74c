"""Run several in-process nodes of one in-memory swarm concurrently (one thread each), as a test does."""

from __future__ import annotations

import threading

from node.round.loop import run_round
from node.runner import meet_peers


def run_concurrently(nodes: list, rounds: int, timeout_s: float = 300.0) -> list[list[dict]]:
    """Every node meets its peers, then runs `rounds` rounds in its own thread; returns each node's
    metrics lines. The nodes are closed afterwards, whatever happens."""
    results: list[list[dict]] = [[] for _ in nodes]

    def run(i: int) -> None:
        meet_peers(nodes[i])
        for r in range(rounds):
            results[i].append(run_round(nodes[i], r).line())

    try:
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(nodes))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout_s)
        assert not any(t.is_alive() for t in threads), "a round did not finish"
    finally:
        for n in nodes:
            n.close()
    return results
