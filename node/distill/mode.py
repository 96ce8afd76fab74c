"""A node's on-policy distillation, built from its `distill` config: the teacher's service, the student's
requests, the score stream they share, and λ of the round.

`build_distill(node)` returns None when the node neither serves nor names teachers. The round
(node.round.loop.run_round) calls `ask` after sampling, `collect` before selection and `served` for the
metrics line; node.assemble adds losses.distill's term to a student's loss (with_distillation) reading `coef`, under `bounds`
(`teacher_bounds`: the distill section's clips and train.peer_token_floor).
"""

from __future__ import annotations

from typing import Any

from losses.distill import TeacherBounds, linear_lambda
from node.distill.config import DistillConfig
from node.distill.gate import HeadroomGate, own_task_keys
from node.distill.serve import ScoreBudget, ScoreService, Teacher
from node.distill.student import Asked, Student
from protocols.score import ScoreCaps
from swarm.exchange.score_stream import ScoreLink


class Distill:
    """The distillation parts of one node (module docstring)."""

    def __init__(self, cfg: DistillConfig, link: ScoreLink, student: Student | None, service: ScoreService | None,
                 bounds: TeacherBounds = TeacherBounds()):
        self.cfg, self.link, self.student, self.service = cfg, link, student, service
        self.bounds = bounds  # what a teacher's values can do to this node's loss (losses.distill)
        self.signal = cfg.cross_signal  # how a chunk's gap reaches our tokens (losses.distill.signal_gap)
        self.coef = cfg.coef  # λ of the current round (losses.distill reads it through the node's loss)

    def ask(self, round_: int, groups: list, prompts: list[str]) -> Asked | None:
        """Score requests for the round's own groups (None: this node is no student)."""
        if self.student is None:
            return None
        end = self.cfg.coef if self.cfg.coef_end is None else self.cfg.coef_end
        self.coef = linear_lambda(round_, start=self.cfg.coef, end=end, steps=self.cfg.coef_rounds)
        return self.student.ask(round_, groups, prompts)

    def collect(self, asked: Asked | None, gathered: list | None = None) -> dict[str, Any]:
        """The answers onto the groups; the student's metrics. `gathered`: the round's peers' groups (the gate)."""
        if self.student is None or asked is None:
            return {}
        return self.student.collect(asked, gathered or [])

    def served(self) -> dict[str, Any]:
        """What this node's service answered since the last round (nothing for a node that does not serve)."""
        if self.service is None:
            return {}
        counts, tokens, computed = self.service.take_counts()
        return {"distill_served": counts or None, "distill_served_tokens": tokens,
                "distill_served_computed": computed}

    def close(self) -> None:
        self.link.close()


def teacher_bounds(cfg) -> TeacherBounds:
    """What a teacher's values can do to the loss of a node of config `cfg` (a NodeConfig): the `distill` clips and
    the peer floor of `train` (losses.distill.TeacherBounds)."""
    return TeacherBounds(token=cfg.distill.max_token_gap, completion=cfg.distill.max_completion_gap,
                         floor=cfg.train.peer_token_floor, span=cfg.train.peer_floor_span)


def build_distill(node) -> Distill | None:
    """The node's Distill (module docstring), on the score stream its transport opens (Transport.open_score_link)."""
    cfg: DistillConfig = node.cfg.distill
    if not (cfg.serve or cfg.student) or node.transport is None:
        return None
    unresolved = [t for t in cfg.teachers if t.startswith("node:")]
    if unresolved:
        from node.config import ConfigError

        raise ConfigError(f"distill.teachers: {unresolved[0]} names a node of a `swarm local` run, which only "
                          "`swarm local` resolves; give this node its teacher's peer id")
    link = node.transport.open_score_link(max_bytes=cfg.max_request_bytes, timeout_s=cfg.wait_s)
    caps = ScoreCaps(max_bytes=cfg.max_request_bytes, max_decompressed_bytes=4 * cfg.max_request_bytes)
    swarm_id = node.cfg.swarm.swarm_id
    service = student = None
    if cfg.serve:
        budget = ScoreBudget(cfg.serve_tokens_per_s, cfg.serve_burst_s, cfg.serve_share, students=cfg.serve_students,
                             stranger_share=cfg.serve_stranger_share)
        service = ScoreService(Teacher(node.model, node.tokenizer, node.fingerprint, node.policy.lock), swarm_id,
                               budget, caps=caps, max_tokens=cfg.serve_max_tokens, split=cfg.score_split)
        link.serve(service.answer, cfg.serve_students)
    if cfg.student:
        gate = None if cfg.headroom_margin is None else HeadroomGate(
            cfg.headroom_margin, cfg.headroom_groups, list(dict.fromkeys(cfg.teachers)), own_task_keys(node.cfg.tasks))
        student = Student(cfg, link, swarm_id=swarm_id, tokenizer=node.tokenizer, fingerprint=node.fingerprint,
                          vocab_size=node.vocab_size, temperature=node.cfg.generation.temperature, caps=caps, gate=gate)
    return Distill(cfg, link, student, service, teacher_bounds(node.cfg))
