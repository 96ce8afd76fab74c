"""A regenerated task and the error of a task reference that cannot be regenerated (no dependencies)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from protocols.records import TaskRef


@dataclass(frozen=True)
class Task:
    """A regenerated task: its reference, the question, and the verifier's entry."""

    ref: TaskRef
    question: str  # the user message (a receiver checks the sender's prompt contains it)
    answer: str  # ground truth as the dataset states it (for logs and SFT, never sent)
    entry: dict[str, Any]  # the full reasoning-gym item or dataset-file row, what the verifier reads
    messages: tuple[dict[str, Any], ...] | None = None  # a file row's chat-message prompt, rendered as is


class TaskError(ValueError):
    """A TaskRef this node cannot or will not regenerate; `reason` feeds the drop counter."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
