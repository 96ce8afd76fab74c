"""One round of a sampler (HeteroRL): it generates with a learner's weights and never trains.

    1. follow     load the newest verified weights of a followed learner, if new ones arrived (the
                  transfer ran in the background); the policy version becomes theirs
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
from node.round.steps import Gathered, publish, sample
from node.round.train import StepResult

if TYPE_CHECKING:
    from node.round.record import RoundRecord
    from node.round.parts import RoundHost


def run_sampler_round(node: RoundHost, round_: int) -> RoundRecord:
    started = time.perf_counter()
    parts = node.parts
    state = role_state(parts)
    extra = state.follow(parts)  # 1
    return sample_round(node, round_, started, extra, state.take_drops())


def sample_round(node: RoundHost, round_: int, started: float, extra: dict[str, Any],
                 drops: dict[str, int] | None = None) -> dict[str, Any]:
    """Steps 2–6 with the weights the model holds now (bench/learning/heterorl.py loads them itself)."""
    parts = node.parts
    sampled = sample(parts, round_)  # 2, 3, 4
    wire_bytes = publish(parts, round_, sampled)  # 5
    outcome = RoundOutcome(round_, started, sampled.groups, sampled.gen, Selection.empty(), StepResult.empty(),
                           wire_bytes=wire_bytes, gathered=Gathered(drops=drops or {}), extra=extra)
    return finish_round(parts, outcome)  # 6
