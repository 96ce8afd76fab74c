"""One round of a node that samples and trains (SAPO). Start reading here.

    1. tasks      sample B verifiable tasks, render prompts with our chat template
    2. generate   G completions per prompt, with per-token sampling logprobs μ
    3. verify     rewards from our verifier, advantages within each group
    4. publish    our groups go to the swarm (if one is configured)
    5. gather     peers' groups delivered since the last round (no lockstep): regenerated,
                  re-verified, advantages recomputed here
    6. select     SAPO: I local + J external informative groups
    7. score      π_θ on every selected completion, in our tokenization
    8. step       pluggable loss, micro-batches, one optimizer step
    9. sync       new weights into the generator
   10. record     metrics line, held-out eval when due, checkpoint when due

Other modes have their own round function built from the same steps (node.round.steps):
federated mode's is node.federated.round.run_federated_round. docs/ARCHITECTURE.md draws
the data flow and names the function behind each step.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from node.round.report import RoundOutcome, finish_round
from node.round.steps import gather, publish, train, verify

if TYPE_CHECKING:
    from node.node import Node


def run_round(node: Node, round_: int) -> dict[str, Any]:
    started = time.perf_counter()
    g = node.cfg.generation
    tasks = node.tasks.sample(round_, g.prompts_per_round)  # 1
    prompts = [node.prompt_of(t) for t in tasks]
    gen = node.generator.generate(prompts, n=g.group_size)  # 2
    local = verify(node, tasks, gen, round_)  # 3
    wire_bytes = publish(node, round_, local, prompts)  # 4
    gathered = gather(node)  # 5
    selection = node.selector.select(local, gathered.groups)  # 6
    step = train(node, selection.groups)  # 7, 8, 9
    return finish_round(node, RoundOutcome(round_, started, local, gen, selection, step,  # 10
                                           wire_bytes=wire_bytes, gathered=gathered))
