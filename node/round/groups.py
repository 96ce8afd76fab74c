"""Verified prompt groups: rewards from this node's verifier, advantages computed locally.

"Vertical" collaboration (F-TIS §Key Design 3): advantages are always normalised *within one
group* of completions for one prompt, on this node, from rewards this node computed itself —
whether the group was generated here or received from a peer.

  std  (GRPO):     A_i = (r_i − mean(r)) / (std(r) + 1e-6)   (population std)
  mean (Dr.GRPO):  A_i =  r_i − mean(r)
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Literal

from node.tasks.source import Task, TaskSource
from protocols.records import Completion

SELF = "self"


@dataclass
class Group:
    task: Task
    completions: list[Completion]  # in the generator's (possibly a peer's) tokenization
    rewards: list[float]
    advantages: list[float]
    source: str = SELF  # "self" or the sender's peer id
    aligned: bool = True  # sender's tokenizer == ours: its token ids and per-token μ apply
    round: int = 0
    policy_version: int = 0
    created_at: float = field(default_factory=time.time)
    # our own groups only: a teacher's log π_T of each token of each completion (None: that completion unscored),
    # set by on-policy distillation (node.distill.student) before selection
    teacher_logps: list[list[float | None] | None] | None = None  # an entry None: a token left unscored
    teacher_chunks: list[list[int] | None] | None = None  # its tokens per chunk of each (None: one token per chunk)
    teacher_kinds: list[list[int] | None] | None = None  # per token of each: text 0, final EOS 1, off-split 2 (byte path)

    @property
    def is_external(self) -> bool:
        return self.source != SELF

    @property
    def informative(self) -> bool:
        """False when every completion got the same reward (zero advantage) and no teacher scored any of them:
        zero gradient."""
        return max(self.rewards) > min(self.rewards) or any(self.teacher_logps or ())


def advantages(rewards: list[float], mode: Literal["std", "mean"] = "std") -> list[float]:
    mean = statistics.fmean(rewards)
    if mode == "mean":
        return [r - mean for r in rewards]
    std = statistics.pstdev(rewards)
    return [(r - mean) / (std + 1e-6) for r in rewards]


def verify_group(
    tasks: TaskSource,
    task: Task,
    completions: list[Completion],
    *,
    mode: Literal["std", "mean"] = "std",
    **meta,
) -> Group:
    """Score each completion with this node's verifier and normalise within the group."""
    rewards = tasks.score_group(task, [c.text for c in completions])
    return Group(task, list(completions), rewards, advantages(rewards, mode), **meta)
