"""The headroom gate: a student asks a teacher only while the teacher is measurably better at the student's own tasks.

A teacher's word about itself is never taken: its score is the mean reward, **under the student's own verifier**,
of the teacher's own sampled answers — its groups that reached the student through the exchange, each
regenerated from its TaskRef and re-verified by the student (node.round.ingest: claimed rewards are ignored),
counting only tasks of the student's own training datasets (same name and config). The student's score is the same
measure on its own sampled groups (every group it sampled, before selection). Both are means over each side's
latest `distill.headroom_groups` groups, tasks the student has not trained on when sampled (each round draws fresh
items), at each side's sampling temperature.

    state      per teacher named by `distill.teachers`: `measuring` (fewer than headroom_groups groups of either
               side yet: not asked), `open` (teacher − student ≥ `distill.headroom_margin`: asked), `closed`
               (below it: not asked); without a margin (null, the default) there is no gate and every named teacher
               is asked in turn, as before the gate
    observe    the round's own groups (Distill.ask) and its gathered groups (Distill.collect)

What it cannot rule out: a teacher that publishes only the groups it did well on (it chooses what it publishes);
a student that must rule that out names only teachers it trusts (`distill.teachers` already is such a list).
The gate's state and both scores are in the metrics line (`distill_gate`) and the dashboard.
"""

from __future__ import annotations

from collections import deque

from node.round.groups import Group


def _key(task) -> tuple[str, str]:
    return task.ref.dataset, repr(sorted((task.ref.config or {}).items()))


def own_task_keys(tasks_cfg) -> set[tuple[str, str]]:
    """(dataset, config) of a node's own training datasets (a TaskConfig's `datasets`; file datasets by name)."""
    return {(s.name, repr(sorted((getattr(s, "config", None) or {}).items()))) for s in tasks_cfg.datasets}


class HeadroomGate:
    """The gate of one student (module docstring); `tasks`: the (dataset, config) of its own training datasets."""

    def __init__(self, margin: float | None, window: int, teachers: list[str], tasks: set[tuple[str, str]]):
        self.margin, self.window, self.tasks = margin, window, tasks
        self.own: deque[float] = deque(maxlen=window)  # mean reward of each of our latest groups
        self.theirs: dict[str, deque[float]] = {t: deque(maxlen=window) for t in teachers}

    def observe(self, groups: list[Group]) -> None:
        """Own groups and groups gathered from peers (only the named teachers' count, on our own tasks)."""
        for g in groups:
            if not g.rewards or _key(g.task) not in self.tasks:
                continue
            score = sum(g.rewards) / len(g.rewards)
            if not g.is_external:
                self.own.append(score)
            elif g.source in self.theirs:
                self.theirs[g.source].append(score)

    @staticmethod
    def _mean(xs) -> float | None:
        return sum(xs) / len(xs) if xs else None

    def state(self, teacher: str) -> str:
        if self.margin is None:
            return "off"
        theirs = self.theirs.get(teacher, ())
        if len(theirs) < self.window or len(self.own) < self.window:
            return "measuring"
        return "open" if self._mean(theirs) - self._mean(self.own) >= self.margin else "closed"

    def may_ask(self, teacher: str) -> bool:
        return self.state(teacher) in ("off", "open")

    def report(self) -> dict | None:
        """The metrics line's `distill_gate`: per teacher its state, its score and groups; ours (None: no gate)."""
        if self.margin is None:
            return None
        own = self._mean(self.own)
        return {"margin": self.margin, "student": None if own is None else round(own, 4), "student_groups": len(self.own),
                "teachers": {t: {"state": self.state(t), "groups": len(xs),
                                 "score": None if not xs else round(self._mean(xs), 4)}
                             for t, xs in self.theirs.items()}}
