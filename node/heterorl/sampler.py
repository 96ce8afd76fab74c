"""One round of a sampler (HeteroRL): it generates with a learner's weights and never trains.

    1. follow     load the newest verified weights of a followed learner, if new ones arrived (the
                  transfer ran in the background); node.policy_version becomes their version
    2. tasks      B verifiable tasks, prompts in our chat template
    3. generate   G completions per prompt with per-token μ, under the loaded weights
    4. verify     our verifier's rewards (informational for the learner, which re-verifies)
    5. publish    the groups as wire records, each tagged with the version it was sampled with
    6. record     metrics line (weights version, load, latency, drops by reason), checkpoint when due

Killing the learner costs a sampler nothing: it keeps generating with the last weights it loaded,
and takes the next version a restarted learner announces (docs/ARCHITECTURE.md §12).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from node.heterorl.state import role_state
from node.round.report import RoundOutcome, finish_round
from node.round.select import Selection
from node.round.steps import Gathered, publish, verify
from node.round.train import StepResult

if TYPE_CHECKING:
    from node.node import Node


def run_sampler_round(node: Node, round_: int) -> dict[str, Any]:
    started = time.perf_counter()
    state = role_state(node)
    extra = state.follow(node)  # 1
    return sample_round(node, round_, started, extra, state.take_drops())


def sample_round(node: Node, round_: int, started: float, extra: dict[str, Any],
                 drops: dict[str, int] | None = None) -> dict[str, Any]:
    """Steps 2–6 with the weights the model holds now (bench/heterorl.py loads them itself)."""
    g = node.cfg.generation
    tasks = node.tasks.sample(round_, g.prompts_per_round)  # 2
    prompts = [node.prompt_of(t) for t in tasks]
    gen = node.generator.generate(prompts, n=g.group_size)  # 3
    local = verify(node, tasks, gen, round_)  # 4
    wire_bytes = publish(node, round_, local, prompts)  # 5
    outcome = RoundOutcome(round_, started, local, gen, Selection([], 0, 0, 0), StepResult({}, 0, 0, 0, 0.0, 0),
                           wire_bytes=wire_bytes, gathered=Gathered(drops=drops or {}), extra=extra)
    return finish_round(node, outcome)  # 6
