"""The steps a round is made of, shared by every round function (node.round.loop, node.federated.round).

Each step takes the node and returns a typed value; none of them decides what kind of round it is.

  verify   our verifier's rewards and within-group advantages for freshly generated groups
  publish  our groups as wire records to the swarm (0 bytes without a swarm)
  gather   peers' groups: vetted by the transport, regenerated and re-verified here (ingest)
  train    score the selected groups under π_θ, one optimizer step, new weights into the generator
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from node.round.groups import Group, verify_group
from node.round.ingest import ingest_for
from node.round.records import to_records
from node.round.train import StepResult, build_rows, train_step

if TYPE_CHECKING:
    from node.generation.base import GenerationResult
    from node.node import Node
    from node.tasks.source import Task


@dataclass
class Gathered:
    """Peers' groups accepted this round, what was dropped (reason → count) and how long we waited."""

    groups: list[Group] = field(default_factory=list)
    drops: dict[str, int] = field(default_factory=dict)
    latency_s: float | None = None  # None: nothing arrived (or no swarm)


def verify(node: Node, tasks: list[Task], gen: GenerationResult, round_: int) -> list[Group]:
    """Rewards from our verifier and advantages within each group, tagged with the sampling version."""
    # the version of the weights that actually sampled (vLLM may lag by up to sync_every − 1 steps)
    sampled_by = node.policy_version if gen.policy_version is None else gen.policy_version
    mode = node.cfg.train.advantage
    return [verify_group(node.tasks, t, comps, mode=mode, round=round_, policy_version=sampled_by)
            for t, comps in zip(tasks, gen.groups)]


def publish(node: Node, round_: int, groups: list[Group], prompts: list[str]) -> int:
    """Wire bytes of the bundle we published (0 without a swarm)."""
    if node.transport is None:
        return 0
    return node.transport.publish(round_, to_records(node, round_, groups, prompts))


def gather(node: Node, round_: int) -> Gathered:
    """Peers' groups for this round (bounded wait) and late ones from the staleness window."""
    if node.transport is None:
        return Gathered()
    sw = node.cfg.swarm
    now = node.transport.gather([round_], timeout=sw.gather_timeout_s, min_peers=sw.gather_min_peers)
    window = range(max(0, round_ - node.cfg.ingest.max_staleness_rounds), round_)
    late = node.transport.gather(list(window), timeout=0.0, min_peers=0) if len(window) else None
    records = now.records + (late.records if late else [])
    drops = now.drops + (late.drops if late else type(now.drops)())
    result = ingest_for(node, records, round_)
    drops.update(result.drops)
    node.selector.prune(lambda g: round_ - g.round <= node.cfg.ingest.max_staleness_rounds)
    return Gathered(result.groups, dict(drops), now.latency_s)


def train(node: Node, groups: list[Group], regularizer=None) -> StepResult:
    """Score `groups` in our tokenization, take one optimizer step, sync the generator (steps 7–9)."""
    cfg = node.cfg
    rows = build_rows(groups, node.tokenizer, node.prompt_of)
    step = train_step(node.model, node.optimizer, rows, node.loss_fn, cfg.train,
                      temperature=cfg.generation.temperature, pad_id=node.tokenizer.pad_token_id,
                      regularizer=regularizer)
    if step.stepped:
        node.policy_version += 1
        node.generator.sync_weights(node.model, node.policy_version)
    return step
