"""The swarm runner: N nodes in one process on the in-memory twin of the transport (swarm.exchange.twin: the real
encode, vet, receive rules and fan-in), one torch thread each, taking turns round by round, so arms differ only in
what they set. Used by the learning benches that compare a node in a swarm with one alone.

Two twins (`twin`):
  rounds  (default) delivery by round: what a node publishes in round r is visible to every peer from round
          r + `delay` (swarm.exchange.twin, by rounds), and every clock the nodes and their transports read is
          virtual — round r, turn k is T0 + r·round_s + k·TURN_S — with seeded choices, so the fan-in's windows,
          ages and standing are functions of the rounds alone and a run reproduces to the last digit whatever
          the machine's load (tests/integration/test_sharing_twin.py). round_s (default 10 s, one announcement
          window of the default swarm config) is the swarm time a round stands for.
  clock   the wall-clock twin of earlier sections: fetch windows and ages run on wall time, so which peers'
          groups a round receives depends on how fast the rounds run, and a run with peers does not reproduce
          (two runs of one arm: up to 0.039 held-out apart on a seed, 80 against 72 peers' groups a node;
          docs/benchmarks/learning.md §13).
A node without peers reproduces under both."""

from __future__ import annotations

import random
import statistics
import tempfile
import time

from node.books.progress import Progress
from node.config import load_config
from node.node import Node
from node.round.loop import run_round
from node.round.record import Distill
from swarm.exchange.twin import InMemoryHub, InMemoryTransport

TWINS = ("rounds", "clock")
BOUNDS = ("distill_clipped_share", "distill_capped_share", "distill_guarded_share")  # StepMetrics fields
# per node, summed over its rounds (the results' keys are the record's field names)
TOTALS = {"tokens_generated": lambda rec: rec.generation.tokens_generated,
          "tokens_trained": lambda rec: rec.step.tokens_trained,
          "groups_informative": lambda rec: rec.generation.groups_informative,
          "groups_received": lambda rec: rec.exchange.groups_received,
          "groups_received_informative": lambda rec: rec.exchange.groups_received_informative,
          "groups_replayed": lambda rec: rec.step.groups_replayed, "round_s": lambda rec: rec.round_s,
          "distill_tokens_scored": lambda rec: rec.distill and rec.distill.distill_tokens_scored,
          "distill_served_computed": lambda rec: rec.distill and rec.distill.distill_served_computed}
T0 = 1.8e9  # the virtual epoch of a swarm run by rounds (seconds; any fixed date)
TURN_S = 1e-3  # virtual time between two nodes' turns within one round


class RoundClock:
    """The virtual clock of a swarm run by rounds: `at(r, k)` before node k's turn in round r."""

    def __init__(self, round_s: float):
        self.round_s, self.now = round_s, T0

    def at(self, round_: int, turn: int) -> None:
        self.now = T0 + round_ * self.round_s + turn * TURN_S

    def __call__(self) -> float:
        return self.now


def run_swarm(configs: list[str], local: int | list[int], external: int | list[int], seed: int, rounds: int,
              overrides: dict | list[dict], generate: int | list[int] | None = None, *, twin: str = "rounds",
              delay: int = 1, round_s: float = 10.0, replay_to: list[list[int]] | None = None,
              progress: str | None = None) -> dict:
    """One swarm (node k runs configs[k]), one seed: per-node reward curves, held-out accuracy (and mean
    verifier score, and accuracy per task kind when the held-out mix has several) before/after, peers'
    groups used and their mean IS weight (rounds that used any), tokens generated and trained, the share
    of informative groups among the node's own and among those it received, and seconds per round.
    `local`, `external`, `generate` (groups generated per round; default local + external) and
    `overrides` are one for all nodes or one per node. `twin`, `delay`, `round_s`: the module docstring.
    `replay_to[k][r]`: node k's budget of trained completion tokens in round r, filled by replaying its own groups
    (select.replay_tokens; the solo control at a swarm node's trained tokens): such a node takes no peers' groups
    (J = 0 and select.external_tokens off, whatever `overrides` say). `progress`: a label; the run then prints a
    line with its rounds done and an ETA to stderr at most once a minute (node.books.progress), node 0's reward
    beside it (a job of a long benchmark runs for an hour without finishing a result)."""
    if twin not in TWINS:
        raise ValueError(f"twin must be one of {TWINS}, not {twin!r}")
    by_rounds = twin == "rounds"
    hub = InMemoryHub(delay_rounds=delay if by_rounds else None)
    clock = RoundClock(round_s)
    nodes = len(configs)
    local, external = [x if isinstance(x, list) else [x] * nodes for x in (local, external)]
    generate = [i + j for i, j in zip(local, external)] if generate is None else \
        generate if isinstance(generate, list) else [generate] * nodes
    overrides = overrides if isinstance(overrides, list) else [overrides] * nodes
    totals = TOTALS
    with tempfile.TemporaryDirectory() as tmp:
        swarm = []
        for k, config in enumerate(configs):
            opts = {"name": f"n{k}", "seed": 100 * seed + k, "tasks.seed": 100 * seed + k, "rounds": rounds,
                    "torch_threads": 1, "select.local_groups": local[k], "select.external_groups": external[k],
                    "generation.prompts_per_round": generate[k], "eval.every": 0,
                    "metrics.console": False, "checkpoint.every": 10**6, "swarm.enabled": True, **overrides[k]}
            if replay_to is not None:  # the node alone: no peers' groups, whatever an update's options say
                opts.update({"select.replay_tokens": max(1, replay_to[k][0]), "select.external_groups": 0,
                             "select.external_tokens": 0})
            cfg = load_config(config, opts)
            twin_opts = {"clock": clock, "rng": random.Random(f"twin {seed} {k}")} if by_rounds else {}
            transport = InMemoryTransport(hub, f"n{k}", cfg.swarm.swarm_id, **twin_opts)
            swarm.append(Node(cfg, f"{tmp}/n{k}", transport=transport, clock=clock if by_rounds else time.time))
        try:
            first = [node.evaluate_items() for node in swarm]
            curves = [[] for _ in swarm]
            trained = [[] for _ in swarm]  # completion tokens trained per round
            externals = [0] * nodes
            sums = [dict.fromkeys(totals, 0.0) for _ in swarm]
            weights = [[] for _ in swarm]
            shares, filtered, kls = [[] for _ in swarm], [[] for _ in swarm], [[] for _ in swarm]
            distill_kls = [[] for _ in swarm]  # a student's KL to its teacher on its scored tokens, per scored round
            off_split = [[] for _ in swarm]  # byte path: share of its scored completions not split canonically
            gates = [[] for _ in swarm]  # a student's headroom gate, per round (with distill.headroom_margin)
            bounds = [dict.fromkeys(BOUNDS, 0.0) for _ in swarm]
            shown = Progress(progress, rounds, unit="rounds", every_s=60.0, bar=False) if progress else None
            for r in range(rounds):
                hub.round = r
                for k, node in enumerate(swarm):
                    clock.at(r, k)
                    if replay_to is not None:
                        node.selector.replay_to = max(1, replay_to[k][r])
                    rec = run_round(node, r)
                    m, d = rec.metrics, rec.distill or Distill()
                    curves[k].append(rec.generation.reward_mean)
                    trained[k].append(rec.step.tokens_trained)
                    externals[k] += rec.step.groups_external
                    for key, value in totals.items():
                        sums[k][key] += value(rec) or 0
                    if d.distill_tokens_scored:  # a round none of whose tokens were scored has no KL (its 0.0
                        distill_kls[k].append(m.distill_kl)  # is no measurement: round 0 across tokenizers)
                    if d.distill_requests:
                        off_split[k].append(d.distill_off_split)
                    if d.distill_gate:  # the headroom gate's state and both scores (node/distill/gate.py)
                        gates[k].append({"round": r, **d.distill_gate})
                    for key in BOUNDS:  # how often a teacher's limits bound (losses/distill.py), the worst round
                        bounds[k][key] = max(bounds[k][key], getattr(m, key) or 0.0)
                    if rec.step.groups_external and m.is_weight_external is not None:
                        weights[k].append(m.is_weight_external)
                        shares[k].append(m.is_weight_external_share or 0.0)
                        filtered[k].append(m.filtered_frac or 0.0)
                        if m.kl_beh_external is not None:
                            kls[k].append(m.kl_beh_external)
                if shown is not None:
                    reward = curves[0][-1]
                    shown.update(r + 1, "" if reward is None else f"node 0 reward {reward:.3f}")
            last = [node.evaluate_items() for node in swarm]
        finally:
            for node in swarm:
                node.close()
    before, after = [e.accuracy for e in first], [e.accuracy for e in last]
    return {"curves": curves, "trained_by_round": trained, "twin": twin, "delay": delay if by_rounds else None,
            "virtual_round_s": round_s if by_rounds else None, "before": before, "after": after,
            "external_groups": externals,
            "score_before": [e.score for e in first], "score_after": [e.score for e in last],
            "before_by_task": [e.by_label() for e in first], "after_by_task": [e.by_label() for e in last],
            "generated_groups": [g * rounds for g in generate], **{k: [s[k] for s in sums] for k in totals},
            "external_weight": [statistics.fmean(w) if w else None for w in weights],
            "external_share": [statistics.fmean(w) if w else None for w in shares],  # weights ≥ 0.1 among them
            "filtered": [statistics.fmean(w) if w else None for w in filtered],  # rows a filter zeroed (f-*)
            "kl_external": [statistics.fmean(w) if w else None for w in kls],  # KL(μ‖π) on peers' rows (k3)
            "distill_kl": [[x for x in w if x is not None] or None for w in distill_kls],  # per scored round (students)
            "distill_off_split": [w or None for w in off_split],  # per round asked (None: not the byte path)
            "distill_gate": [w or None for w in gates],
            "distill_bounds": bounds,  # per node: the largest share of a round the teacher's limits bound
            "cum_reward": statistics.fmean(sum(c) for c in curves),
            "gain": statistics.fmean(a - b for a, b in zip(after, before))}
