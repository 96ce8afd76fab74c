"""One round of a node that samples and trains (SAPO). Start reading here.

    1. tasks      sample B verifiable tasks, render prompts with our chat template
    2. generate   G completions per prompt, with per-token sampling logprobs μ
    3. verify     rewards from our verifier, advantages within each group
                  (1–3 are one step, `sample`, with which every mode opens its round)
    4. publish    our groups go to the swarm (if one is configured)
       ask        a student's own completions to a named teacher (on-policy distillation, node.distill)
    5. gather     peers' groups delivered since the last round (no lockstep): regenerated,
                  re-verified, advantages recomputed here
       collect    the teacher's per-token log-probabilities onto our groups (waits ≤ distill.wait_s)
    6. select     SAPO: I local + J external informative groups
    7. score      π_θ on every selected completion, in our tokenization
    8. step       pluggable loss, micro-batches, one optimizer step
    9. sync       new weights into the generator
   10. record     metrics line, held-out eval when due, checkpoint when due

The round reads the node's parts (node.round.parts.RoundParts), never the node itself.
Other modes have their own round function built from the same steps (node.round.steps):
federated mode's is node.federated.round.run_federated_round. docs/ARCHITECTURE.md draws
the data flow and names the function behind each step.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from node.round.report import RoundOutcome, finish_round
from node.round.steps import gather, publish, sample, train

if TYPE_CHECKING:
    from node.round.parts import RoundHost
    from node.round.record import RoundRecord


def run_round(node: RoundHost, round_: int) -> RoundRecord:
    started = time.perf_counter()
    parts = node.parts
    sampled = sample(parts, round_)  # 1, 2, 3
    wire_bytes = publish(parts, round_, sampled)  # 4
    asked = parts.distill.ask(round_, sampled.groups, sampled.prompts) if parts.distill else None  # 4
    gathered = gather(parts)  # 5
    taught = parts.distill.collect(asked, gathered.groups) if parts.distill else {}  # 5
    selection = parts.selector.select(sampled.groups, gathered.groups)  # 6
    step = train(parts, selection.groups)  # 7, 8, 9
    if parts.distill:
        taught |= parts.distill.served()
    return finish_round(parts, RoundOutcome(round_, started, sampled.groups, sampled.gen, selection, step,  # 10
                                            wire_bytes=wire_bytes, gathered=gathered, extra=taught))
