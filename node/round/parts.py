"""What a round reads of its node: `RoundParts`, handed out by the node (node.node.Node.parts) for each round, of
the parts node.assemble built.

The steps (node.round.steps) and every round function (node.round.loop, node.federated.round,
node.heterorl) take these parts, never the node itself, so nothing under node.round, node.federated
or node.heterorl imports node.node.

  PolicyState   the weights being trained, their optimizer and version: the one state a round changes
                (shared with the node, which reads it for checkpoints)
  RoundBook     the record keeping that ends a round: held-out eval, the metrics log, checkpoints
  RoundParts    config, tasks, generator, verifier, loss, selector, transport and the two above
  RoundHost     what a round function is handed: anything that builds the parts (the node)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from node.books.metrics import EvalResult, MetricsLog
    from node.config import NodeConfig
    from node.generation.base import Generator
    from node.round.dedup import SeenGroups
    from node.round.select import SapoSelector
    from node.tasks.source import Task, TaskSource
    from swarm.exchange.transport import Transport


@dataclass
class PolicyState:
    """The policy being trained: its model, optimizer (federated averaging replaces it) and version."""

    model: Any
    optimizer: Any
    version: int = 0  # optimizer steps taken (plus adapter averages; a sampler: the learner's loaded version)
    # held while the weights change (the train step), so a forward pass of another thread (a teacher scoring a
    # peer's request: node.distill.serve) never runs inside an optimizer step
    lock: threading.RLock = field(default_factory=threading.RLock)


class RoundBook(Protocol):
    """The node's record keeping at the end of a round (node.round.report.finish_round)."""

    log: MetricsLog
    last_eval: EvalResult | None
    eval_before: float | None
    eval_before_se: float | None

    @property
    def eval_size(self) -> int: ...

    def eval_due(self, round_: int) -> bool: ...

    def evaluate(self) -> float: ...

    def checkpoint_due(self, round_: int) -> bool: ...

    def save_checkpoint(self, round_: int) -> Path: ...


@dataclass(frozen=True)
class RoundParts:
    """The parts of a node a round reads; `policy` is the state it changes."""

    cfg: NodeConfig
    peer_id: str  # ours on the swarm (cfg.name without one)
    fingerprint: str  # our tokenizer's fingerprint: peers with the same one send ids we can use
    vocab_size: int
    tokenizer: Any
    tasks: TaskSource  # node.federated.mode.FederatedTasks in federated mode
    prompt_of: Callable[[Task], str]  # a task's prompt in our chat template
    generator: Generator
    loss_fn: Any  # losses.compose.Loss (node.assemble.build_node_loss); a bare loss function in some tests
    reference: Any  # π_ref of a KL penalty (None: the loss needs none)
    policy: PolicyState
    selector: SapoSelector
    seen_groups: SeenGroups
    transport: Transport | None  # the in-memory twin or hivemind, never told apart here; None: no swarm
    book: RoundBook
    federated: Any = None  # node.federated.mode.Federated in federated mode
    hetero: Any = None  # node.heterorl.state's SamplerState / LearnerState for those roles
    distill: Any = None  # node.distill.mode.Distill: a teacher's service, a student's requests (None: neither)
    # the round's clock (seconds since the epoch): record dates, the ingest horizon, the pool's staleness; a bench
    # swarm run by rounds (bench.harness.swarm, `twin: rounds`) passes a virtual one so that a run reproduces
    clock: Callable[[], float] = time.time

    @property
    def model(self) -> Any:
        return self.policy.model


class RoundHost(Protocol):
    """What a round function is handed (node.node.Node): it builds the round's parts."""

    @property
    def parts(self) -> RoundParts: ...
