"""The end of every round: its record (node.round.record; written as a JSONL line, to Prometheus and the console),
held-out eval and checkpoint when due."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from node.round.groups import Group
from node.round.record import DISTILL_KEYS, Distill, Eval, Exchange, Generation, Peers, RoundRecord, Step
from node.round.select import Selection
from node.round.steps import Gathered, PeerTally
from node.round.train import StepResult

if TYPE_CHECKING:
    from node.generation.base import GenerationResult
    from node.round.parts import RoundParts


@dataclass
class RoundOutcome:
    """Everything a round produced that its metrics line reports."""

    round: int
    started: float  # time.perf_counter() at the round's start
    local: list[Group]  # our verified groups of this round
    gen: GenerationResult
    selection: Selection
    step: StepResult
    wire_bytes: int = 0  # bytes we published
    gathered: Gathered = field(default_factory=Gathered)
    extra: dict[str, Any] = field(default_factory=dict)  # mode-specific fields (federated: public, averaging)


def finish_round(parts: RoundParts, out: RoundOutcome) -> RoundRecord:
    """Held-out eval when due, the round's record (written to the metrics log), a checkpoint when due."""
    book = parts.book
    eval_accuracy = book.evaluate() if book.eval_due(out.round) else None
    record = round_record(parts, out, eval_accuracy, time.perf_counter() - out.started)
    book.log.write(record)
    if book.checkpoint_due(out.round):
        book.save_checkpoint(out.round)
    return record


def round_record(parts: RoundParts, out: RoundOutcome, eval_accuracy: float | None, round_s: float) -> RoundRecord:
    """The round's record, section by section (node.round.record)."""
    extra = dict(out.extra)
    distill = {k: extra.pop(k) for k in list(extra) if k in DISTILL_KEYS}
    return RoundRecord(
        node=parts.cfg.name, round=out.round, policy_version=parts.policy.version, round_s=round_s, time=time.time(),
        generation=generation_section(parts, out), step=step_section(out), exchange=exchange_section(parts, out),
        peers=peers_section(out), eval=eval_section(parts, out, eval_accuracy),
        distill=Distill(**distill) if distill else None, mode=extra)


def generation_section(parts: RoundParts, out: RoundOutcome) -> Generation:
    rewards = [r for g in out.local for r in g.rewards]  # none: a learner that received nothing this round
    lengths = [len(c.token_ids) for g in out.local for c in g.completions]
    gen = out.gen
    return Generation(
        reward_mean=statistics.fmean(rewards) if rewards else None,
        accuracy=sum(r >= 1.0 for r in rewards) / len(rewards) if rewards else None,
        tokens_generated=gen.new_tokens, completion_len_mean=statistics.fmean(lengths) if lengths else None,
        gen_s=gen.seconds, tokens_per_s=gen.new_tokens / max(gen.seconds, 1e-9),
        decode=getattr(parts.generator, "decode_mode", None),  # DecodeLoop.mode
        groups_informative=sum(g.informative for g in out.local))  # own groups with signal (rewards differ)


def step_section(out: RoundOutcome) -> Step:
    sel, step = out.selection, out.step
    return Step(groups_local=sel.local, groups_external=sel.external, groups_replayed=sel.replayed,
                groups_zero_adv=sel.dropped_zero_adv,
                external_peers=sorted({g.source for g in sel.groups if g.is_external}),
                rows_trained=step.rows, tokens_trained=step.tokens, rows_dash_filtered=step.rows_filtered,
                step_s=step.seconds, metrics=step.metrics)


def exchange_section(parts: RoundParts, out: RoundOutcome) -> Exchange:
    g = out.gathered
    return Exchange(
        groups_published=len(out.local) if out.wire_bytes else 0, groups_received=len(g.groups),
        groups_received_informative=sum(x.informative for x in g.groups), wire_bytes=out.wire_bytes,
        bytes_downloaded=g.bytes, gather_s=g.waited_s, fanin_skipped=g.skipped, pool_size=len(parts.selector.pool),
        pool_aged_out=g.too_old, peer_groups_note=peer_groups_note(out, parts.cfg.select.external_groups),
        drops=g.drops, refused=g.refused or None,  # streams refused, bundles declined, addresses not dialled
        # gossip | dht (swarm.exchange.gossip); with swarm.gossip on, pubsub's state and counts since the last round
        announce_transport=g.announce.get("transport"),
        gossip={k: v for k, v in g.announce.items() if k != "transport"} or None)


def peers_section(out: RoundOutcome) -> Peers:
    g = out.gathered  # standing of the peers seen (swarm.exchange.standing): good ones are waited for, fetched first
    return Peers(peers_seen=g.peers_seen, peers_good=g.standing.get("good", 0), peers_new=g.standing.get("new", 0),
                 peers_backoff=g.standing.get("backoff", 0), peers_backed_off=g.backed_off or None,
                 peer_stats=peer_stats(out))


def eval_section(parts: RoundParts, out: RoundOutcome, eval_accuracy: float | None) -> Eval:
    book = parts.book
    last = book.last_eval if eval_accuracy is not None else None
    return Eval(eval_accuracy=eval_accuracy, eval_se=last.se if last else None,
                eval_score=last.score if last else None,  # partial credit moves before exact matches do
                eval_accuracy_by_task=(last.by_label() or None) if last else None,
                eval_accuracy_before=book.eval_before if out.round == 0 else None,
                eval_se_before=book.eval_before_se if out.round == 0 else None,
                eval_size=book.eval_size if eval_accuracy is not None or out.round == 0 else None)


def peer_stats(out: RoundOutcome) -> dict[str, dict]:
    """Per peer this round: its model (as its records name it), groups accepted, groups trained on, drops by reason."""
    used: dict[str, int] = {}
    for g in out.selection.groups:
        if g.is_external:
            used[g.source] = used.get(g.source, 0) + 1
    stats = {p: tally.stats(used.pop(p, 0)) for p, tally in out.gathered.by_peer.items()}
    for peer, n in used.items():  # pooled in an earlier round, trained on in this one
        stats[peer] = PeerTally().stats(n)
    return stats


def peer_groups_note(out: RoundOutcome, wanted: int) -> str | None:
    """Why a round that wanted peers' groups trained on none (None when it used some or wants none)."""
    g = out.gathered
    if out.selection.external or not wanted or g.waited_s is None or out.extra.get("public") is not None:
        return None
    if g.peers_seen == 0:
        return "no peers seen"
    if g.groups and not any(x.informative for x in g.groups):
        return "no informative peer groups (all rewards equal)"
    if g.drops and not g.groups:
        return "all dropped: " + ", ".join(f"{k} {v}" for k, v in sorted(g.drops.items()))
    if g.too_old and not g.groups:
        return "all too old"
    return "none new in the pool (none arrived yet, or all already used)"
