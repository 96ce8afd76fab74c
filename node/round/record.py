"""The round record: what one round reports, in sections, each field declared once with its meaning.

    RoundRecord      node, round, policy_version, round_s, time, and the sections:
      Generation     our own groups of the round: rewards, tokens generated, decode speed
      Step           what the optimizer trained on (own, peers', replayed groups, rows, tokens), with
        StepMetrics  the loss's and the step's numbers; each field declares how it combines over a step's
                     micro-batches (`Over`); the round reports their mean over its steps (maxima for MAX)
      Exchange       what went over the wire: published, received, fetched, dropped, refused, gossip
      Peers          the peers seen, by standing, and per peer its tally (peer_stats)
      Eval           held-out accuracy when the round evaluated (and the baseline at round 0)
      Distill        a student's teacher answers, a teacher's service (node.distill); None without distillation
      mode           the fields no section declares: a mode's (federated: public, pubswap_*, avg_*; heterorl:
                     weights_*, staleness_*, delay_*, as their modes document them), the log's marks (start,
                     start_from, resumed, truncated) and, read back, a newer writer's

A record's JSONL line (`line()`) is flat: every field is a key of the line under its own name, as lines
always were, so old runs read back (`from_line`: a missing field is its default, an undeclared key lands in
`mode`). StepMetrics, a sparse section, leaves out its fields that are None; Distill's two parts are in a line
whole or not at all.
`read_records` is the JSONL reader (the last line per round, as a resume may leave two). docs/ROUNDS.md is
generated from these declarations (`python -m node.round.record`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any


class Over(str, Enum):
    """How a step metric combines over one optimizer step's micro-batches (each reports its own mean)."""

    ROWS = "rows"  # a mean over the step's rows: each micro-batch weighted by its share of them
    PEER_ROWS = "peer rows"  # a mean over peers' rows: weighted by the micro-batch's share of peers' rows
    OWN_ROWS = "own rows"  # a mean over our own rows, likewise
    SUM = "sum"  # a count, or the loss itself: the micro-batches' add up
    MAX = "max"  # the largest, also over the round's steps
    STEP = "step"  # set by the step, not by the loss (a loss's value under this name is ignored)


def _f(doc: str, default: Any = None, over: Over | None = None, factory: Any = None, part: str | None = None):
    meta = {"doc": doc, "over": over, "part": part}
    return field(default_factory=factory, metadata=meta) if factory is not None else field(default=default,
                                                                                              metadata=meta)


@dataclass
class Generation:
    """Our own groups of the round (none for a learner that generates nothing)."""

    reward_mean: float | None = _f("mean reward of our completions (None: none generated)")
    accuracy: float | None = _f("share of our completions with reward ≥ 1")
    tokens_generated: int = _f("completion tokens generated", 0)
    completion_len_mean: float | None = _f("mean completion length in tokens")
    gen_s: float = _f("seconds generating", 0.0)
    tokens_per_s: float = _f("tokens_generated / gen_s", 0.0)
    decode: str | None = _f("how decode steps ran: graphs | eager: no CUDA | eager: capture failed: …")
    groups_informative: int = _f("our groups whose rewards differ (a signal for GRPO)", 0)


@dataclass
class StepMetrics:
    """The loss's numbers and the step's (sparse: a loss reports what it computes)."""

    loss: float | None = _f("the step's loss (micro-batches' summed)", over=Over.SUM)
    grad_norm: float | None = _f("gradient norm before clipping", over=Over.STEP)
    prox_loss: float | None = _f("federated proximal term", over=Over.STEP)
    tokens: float | None = _f("completion tokens in a step (the loss's normaliser)", over=Over.STEP)
    steps: float | None = _f("optimizer steps this round", over=Over.STEP)
    is_weight_mean: float | None = _f("mean importance weight (capped where the loss caps it)", over=Over.ROWS)
    is_weight_var: float | None = _f("variance of the importance weight", over=Over.ROWS)
    is_weight_max: float | None = _f("largest importance weight", over=Over.MAX)
    is_weight_external: float | None = _f("mean weight on peers' rows", over=Over.PEER_ROWS)
    is_weight_external_share: float | None = _f("share of peers' weights ≥ NOT_NEGLIGIBLE", over=Over.PEER_ROWS)
    is_weight_extreme: float | None = _f("tokens whose π_θ/μ exceeds EXTREME_WEIGHT (a count)", over=Over.SUM)
    clip_frac: float | None = _f("share of weights clipped or truncated", over=Over.ROWS)
    filtered_frac: float | None = _f("share of rows a filter zeroed", over=Over.ROWS)
    kl_beh: float | None = _f("k3 KL(μ‖π_θ) per token", over=Over.ROWS)
    kl_beh_local: float | None = _f("the same on our own tokens", over=Over.OWN_ROWS)
    kl_beh_external: float | None = _f("the same on peers' tokens", over=Over.PEER_ROWS)
    kl_old: float | None = _f("k3 KL(π_old‖π_θ) per token", over=Over.ROWS)
    kl_ref: float | None = _f("k3 KL to the reference model per token (grpo beta > 0)", over=Over.ROWS)
    floored_share_external: float | None = _f("share of peers' tokens the peer floor zeroed", over=Over.PEER_ROWS)
    imitation_share_external: float | None = _f("share of peers' rows imitated", over=Over.PEER_ROWS)
    imitation_barred_external: float | None = _f("share of peers' rows barred from imitation", over=Over.PEER_ROWS)
    imitation_share_local: float | None = _f("share of our rows imitated", over=Over.OWN_ROWS)
    distill_kl: float | None = _f("KL to the teacher on scored tokens", over=Over.ROWS)
    distill_eos_kl: float | None = _f("the same at the end-of-sequence token", over=Over.ROWS)
    distill_scored_share: float | None = _f("share of our rows the teacher scored", over=Over.ROWS)
    distill_lambda: float | None = _f("distillation coefficient", over=Over.ROWS)
    distill_clipped_share: float | None = _f("share of scored tokens clipped", over=Over.ROWS)
    distill_capped_share: float | None = _f("share of rows capped", over=Over.ROWS)
    distill_guarded_share: float | None = _f("share of rows guarded", over=Over.ROWS)
    other: dict[str, float] = _f("a plugin loss's own metrics (LossOutputs.combine says how; default rows)",
                                 factory=dict)

    def values(self) -> dict[str, float]:
        """The numbers reported, flat (the fields that are not None, then `other`)."""
        return {**{k: v for k in _names(StepMetrics) if (v := getattr(self, k)) is not None}, **self.other}


STEP_OVER: dict[str, Over] = {f.name: f.metadata["over"] for f in fields(StepMetrics) if f.name != "other"}


def over_of(name: str, declared: dict[str, str] | None = None) -> Over:
    """How step metric `name` combines over micro-batches: its field's declaration, else the loss's own
    (`declared`, LossOutputs.combine), else ROWS."""
    spec = STEP_OVER.get(name)
    if spec is not None:
        return spec
    return Over((declared or {}).get(name, Over.ROWS))


def step_metrics(values: dict[str, float]) -> StepMetrics:
    """StepMetrics of a step's combined numbers: the declared fields, the rest in `other`."""
    return StepMetrics(**{k: v for k, v in values.items() if k in STEP_OVER},
                       other={k: v for k, v in values.items() if k not in STEP_OVER})


@dataclass
class Step:
    """What the optimizer trained on."""

    groups_local: int = _f("our groups trained on", 0)
    groups_external: int = _f("peers' groups trained on", 0)
    groups_replayed: int = _f("our groups of earlier rounds trained again (select.replay_tokens)", 0)
    groups_zero_adv: int = _f("groups dropped for zero advantage", 0)
    external_peers: list[str] = _f("peers whose groups were trained on", factory=list)
    rows_trained: int = _f("completions trained on (0: no step)", 0)
    tokens_trained: int = _f("completion tokens trained on (own and peers')", 0)
    rows_dash_filtered: int = _f("rows DASH's filter removed", 0)
    step_s: float = _f("seconds scoring and stepping", 0.0)
    metrics: StepMetrics = _f("the loss's and the step's numbers", factory=StepMetrics)


@dataclass
class Exchange:
    """What went over the wire this round."""

    groups_published: int = _f("our groups published", 0)
    groups_received: int = _f("peers' groups accepted", 0)
    groups_received_informative: int = _f("of those, groups whose rewards differ", 0)
    wire_bytes: int = _f("bytes we published", 0)
    bytes_downloaded: int = _f("bundle bytes fetched", 0)
    gather_s: float | None = _f("seconds waited for peers' groups (None: no wait)")
    fanin_skipped: int = _f("valid announcements not fetched (fan-in budget)", 0)
    pool_size: int = _f("peers' groups held for later rounds", 0)
    pool_aged_out: int = _f("peers' groups too old to use", 0)
    peer_groups_note: str | None = _f("why a round that wanted peers' groups trained on none")
    drops: dict[str, int] = _f("records dropped, by reason", factory=dict)
    refused: dict[str, int] | None = _f("streams refused, bundles declined, addresses not dialled")
    announce_transport: str | None = _f("gossip | dht")
    gossip: dict[str, Any] | None = _f("pubsub's state and counts since the last round")


@dataclass
class Peers:
    """The peers seen this round."""

    peers_seen: int = _f("peers with a fresh valid announcement", 0)
    peers_good: int = _f("in good standing (waited for, fetched first)", 0)
    peers_new: int = _f("not yet in standing", 0)
    peers_backoff: int = _f("backed off", 0)
    peers_backed_off: dict[str, str] | None = _f("a few backed-off peers → their last failure")
    peer_stats: dict[str, dict] | None = _f("per peer: model, received, used, dropped (None: a line older than it)")


@dataclass
class Eval:
    """Held-out evaluation (None on rounds that did not evaluate)."""

    eval_accuracy: float | None = _f("held-out exact-match accuracy after this round")
    eval_se: float | None = _f("its standard error over items")
    eval_score: float | None = _f("mean verifier score on the held-out items (partial credit)")
    eval_accuracy_by_task: dict[str, float] | None = _f("accuracy per task kind, when the mix has several")
    eval_accuracy_before: float | None = _f("round 0: the untrained model's accuracy")
    eval_se_before: float | None = _f("round 0: its standard error")
    eval_size: int | None = _f("held-out items")


@dataclass
class Distill:
    """Distillation (node.distill): a student's answers from its teacher, a teacher's service. Each of the two parts
    is in a line whole (its None fields too) or not at all."""

    distill_teacher: str | None = _f("the teacher asked")
    distill_requests: int | None = _f("groups sent for scoring")
    distill_answers: int | None = _f("groups answered")
    distill_completions_scored: int | None = _f("completions with the teacher's values")
    distill_share_scored: float | None = _f("share of our completions scored")
    distill_tokens_scored: int | None = _f("tokens scored")
    distill_wait_s: float | None = _f("seconds from asking to collecting")
    distill_drops: dict[str, int] | None = _f("answers dropped, by reason")
    distill_retried: int | None = _f("asked again by bytes")
    distill_off_split: float | None = _f("byte path: share of scored completions not split canonically")
    distill_gate: dict[str, Any] | None = _f("the headroom gate's state and scores")
    distill_served: dict[str, int] | None = _f("a teacher: requests answered, by student", part="served")
    distill_served_tokens: int | None = _f("a teacher: tokens scored for students", part="served")
    distill_served_computed: int | None = _f("a teacher: forward passes computed", part="served")


SECTIONS = {"generation": Generation, "step": Step, "exchange": Exchange, "peers": Peers, "eval": Eval}


def _names(cls) -> list[str]:
    return [f.name for f in fields(cls) if f.name not in ("metrics", "other")]


DISTILL_PARTS = {p: [f.name for f in fields(Distill) if (f.metadata["part"] or "student") == p]
                 for p in ("student", "served")}
DISTILL_KEYS = frozenset(_names(Distill))


@dataclass
class RoundRecord:
    """One round's report (module docstring)."""

    node: str = ""
    round: int = 0
    policy_version: int = 0
    round_s: float = 0.0
    time: float = 0.0
    generation: Generation = field(default_factory=Generation)
    step: Step = field(default_factory=Step)
    exchange: Exchange = field(default_factory=Exchange)
    peers: Peers = field(default_factory=Peers)
    eval: Eval = field(default_factory=Eval)
    distill: Distill | None = None
    mode: dict[str, Any] = field(default_factory=dict)

    @property
    def metrics(self) -> StepMetrics:
        return self.step.metrics

    @property
    def trained(self) -> bool:
        """The round took an optimizer step."""
        return bool(self.step.rows_trained)

    def line(self) -> dict[str, Any]:
        """The flat JSONL line (module docstring)."""
        out: dict[str, Any] = {"node": self.node, "round": self.round, "policy_version": self.policy_version}
        for name in SECTIONS:
            section = getattr(self, name)
            out.update({k: getattr(section, k) for k in _names(type(section))})
        out["round_s"], out["time"] = self.round_s, self.time
        out.update(self.step.metrics.values())
        if self.distill is not None:
            for part in DISTILL_PARTS.values():
                if any(getattr(self.distill, k) is not None for k in part):
                    out.update({k: getattr(self.distill, k) for k in part})
        return {**out, **self.mode}

    @classmethod
    def from_line(cls, line: dict[str, Any]) -> RoundRecord:
        """A record from a JSONL line of any version (module docstring)."""
        rest = dict(line)
        head = {k: rest.pop(k) for k in ("node", "round", "policy_version", "round_s", "time") if k in rest}
        parts = {name: _take(sec, rest) for name, sec in SECTIONS.items()}
        parts["step"].metrics = _take(StepMetrics, rest)
        distill = _take(Distill, rest) if DISTILL_KEYS & rest.keys() else None
        return cls(**head, **parts, distill=distill, mode=rest)


def _take(cls, rest: dict[str, Any]):
    """An instance of section `cls` from the keys of `rest` it declares (removed from `rest`)."""
    return cls(**{k: rest.pop(k) for k in _names(cls) if k in rest})


def read_lines(path: Path | str) -> list[dict[str, Any]]:
    """The JSONL reader: the last line per round, in round order (rounds re-run after a resume supersede)."""
    by_round: dict[int, dict[str, Any]] = {}
    for text in Path(path).read_text().splitlines():
        if text.strip():
            line = json.loads(text)
            by_round[line["round"]] = line
    return [by_round[r] for r in sorted(by_round)]


def read_records(path: Path | str) -> list[RoundRecord]:
    """The records of a metrics.jsonl (read_lines), of any version."""
    return [RoundRecord.from_line(line) for line in read_lines(path)]


def schema() -> str:
    """docs/ROUNDS.md: every field of a round's line, by section, with how step metrics combine."""
    out = ["# The round record: every field of a metrics.jsonl line",
           "",
           "Generated from `node/round/record.py` (`python -m node.round.record > docs/ROUNDS.md`); a test keeps it",
           "current. Every line is flat: each field below is a key of the line. Step metrics (sparse: present when",
           "the loss computes them) say how they combine over a step's micro-batches; the round reports their mean",
           "over its optimizer steps (the largest for `max`). Fields a mode adds (federated, heterorl), the log's marks",
           "(`start`, `start_from`, `resumed`, `truncated`) and any a newer version writes are the record's `mode`.",
           "",
           "| section | field | type | meaning |",
           "|---|---|---|---|",
           "| round | `node`, `round`, `policy_version`, `round_s`, `time` | | the node, the round, optimizer steps so "
           "far, the round's seconds, when it ended (Unix time) |"]
    for name, cls in [*SECTIONS.items(), ("step metrics", StepMetrics), ("distill", Distill)]:
        for f in fields(cls):
            if f.name in ("metrics", "other"):
                continue
            over = f.metadata.get("over")
            meaning = f.metadata["doc"] + (f" (combines: {over.value})" if over is not None else "")
            cells = [name, f"`{f.name}`", f"`{f.type}`", meaning]
            out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(schema(), end="")
