"""The swarm runner: N nodes in one process on the in-memory twin of the transport (swarm.exchange.memory: the real
encode, vet, receive rules and fan-in), one torch thread each, taking turns round by round, so arms differ only in
what they set. A node without peers' groups reproduces its run exactly; with peers a run is not reproducible: the
fan-in's fetch windows and announcement ages run on wall-clock time, so which peers' groups a round receives depends
on how fast the rounds run (two runs of one arm on one model: up to 0.039 held-out apart on a seed, 80 against 72
peers' groups a node; docs/BENCHMARKS.md §13). Used by the learning benches that compare a node in a swarm with one
alone."""

from __future__ import annotations

import statistics
import tempfile

from node.config import load_config
from node.node import Node
from node.round.loop import run_round
from swarm.exchange.memory import InMemoryHub, InMemoryTransport


def run_swarm(configs: list[str], local: int | list[int], external: int | list[int], seed: int, rounds: int,
              overrides: dict | list[dict], generate: int | list[int] | None = None) -> dict:
    """One swarm (node k runs configs[k]), one seed: per-node reward curves, held-out accuracy (and mean
    verifier score, and accuracy per task kind when the held-out mix has several) before/after, peers'
    groups used and their mean IS weight (rounds that used any), tokens generated and trained, the share
    of informative groups among the node's own and among those it received, and seconds per round.
    `local`, `external`, `generate` (groups generated per round; default local + external) and
    `overrides` are one for all nodes or one per node."""
    hub = InMemoryHub()
    nodes = len(configs)
    local, external = [x if isinstance(x, list) else [x] * nodes for x in (local, external)]
    generate = [i + j for i, j in zip(local, external)] if generate is None else \
        generate if isinstance(generate, list) else [generate] * nodes
    overrides = overrides if isinstance(overrides, list) else [overrides] * nodes
    totals = ("tokens_generated", "tokens_trained", "groups_informative", "groups_received",
              "groups_received_informative", "round_s", "distill_tokens_scored", "distill_served_computed")
    with tempfile.TemporaryDirectory() as tmp:
        swarm = []
        for k, config in enumerate(configs):
            opts = {"name": f"n{k}", "seed": 100 * seed + k, "tasks.seed": 100 * seed + k, "rounds": rounds,
                    "torch_threads": 1, "select.local_groups": local[k], "select.external_groups": external[k],
                    "generation.prompts_per_round": generate[k], "eval.every": 0,
                    "metrics.console": False, "checkpoint.every": 10**6, "swarm.enabled": True, **overrides[k]}
            cfg = load_config(config, opts)
            swarm.append(Node(cfg, f"{tmp}/n{k}", transport=InMemoryTransport(hub, f"n{k}", cfg.swarm.swarm_id)))
        try:
            first = [node.evaluate_items() for node in swarm]
            curves = [[] for _ in swarm]
            externals = [0] * nodes
            sums = [dict.fromkeys(totals, 0.0) for _ in swarm]
            weights = [[] for _ in swarm]
            shares, filtered, kls = [[] for _ in swarm], [[] for _ in swarm], [[] for _ in swarm]
            distill_kls = [[] for _ in swarm]  # a student's KL to its teacher on its scored tokens, per round
            for r in range(rounds):
                for k, node in enumerate(swarm):
                    m = run_round(node, r)
                    curves[k].append(m["reward_mean"])
                    externals[k] += m["groups_external"]
                    for key in totals:
                        sums[k][key] += m.get(key) or 0
                    if m.get("distill_requests"):
                        distill_kls[k].append(m.get("distill_kl"))
                    if m["groups_external"] and "is_weight_external" in m:
                        weights[k].append(m["is_weight_external"])
                        shares[k].append(m.get("is_weight_external_share", 0.0))
                        filtered[k].append(m.get("filtered_frac", 0.0))
                        if m.get("kl_beh_external") is not None:
                            kls[k].append(m["kl_beh_external"])
            last = [node.evaluate_items() for node in swarm]
        finally:
            for node in swarm:
                node.close()
    before, after = [e.accuracy for e in first], [e.accuracy for e in last]
    return {"curves": curves, "before": before, "after": after, "external_groups": externals,
            "score_before": [e.score for e in first], "score_after": [e.score for e in last],
            "before_by_task": [e.by_label() for e in first], "after_by_task": [e.by_label() for e in last],
            "generated_groups": [g * rounds for g in generate], **{k: [s[k] for s in sums] for k in totals},
            "external_weight": [statistics.fmean(w) if w else None for w in weights],
            "external_share": [statistics.fmean(w) if w else None for w in shares],  # weights ≥ 0.1 among them
            "filtered": [statistics.fmean(w) if w else None for w in filtered],  # rows a filter zeroed (f-*)
            "kl_external": [statistics.fmean(w) if w else None for w in kls],  # KL(μ‖π) on peers' rows (k3)
            "distill_kl": [[x for x in w if x is not None] or None for w in distill_kls],  # per round (students)
            "cum_reward": statistics.fmean(sum(c) for c in curves),
            "gain": statistics.fmean(a - b for a, b in zip(after, before))}
