"""The end of every round: one metrics line (JSONL, Prometheus, console), held-out eval and checkpoint when due."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from node.round.groups import Group
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


def finish_round(parts: RoundParts, out: RoundOutcome) -> dict[str, Any]:
    """Held-out eval when due, the metrics line, a checkpoint when due; returns the metrics."""
    book = parts.book
    eval_accuracy = book.evaluate() if book.eval_due(out.round) else None
    metrics = round_metrics(parts, out, eval_accuracy, time.perf_counter() - out.started)
    book.log.write(metrics)
    if book.checkpoint_due(out.round):
        book.save_checkpoint(out.round)
    return metrics


def round_metrics(parts: RoundParts, out: RoundOutcome, eval_accuracy: float | None, round_s: float) -> dict[str, Any]:
    rewards = [r for g in out.local for r in g.rewards]  # none: a learner that received nothing this round
    lengths = [len(c.token_ids) for g in out.local for c in g.completions]
    sel, step, gen, book = out.selection, out.step, out.gen, parts.book
    return {
        "node": parts.cfg.name,
        "round": out.round,
        "policy_version": parts.policy.version,
        "reward_mean": statistics.fmean(rewards) if rewards else None,
        "accuracy": sum(r >= 1.0 for r in rewards) / len(rewards) if rewards else None,
        "eval_accuracy": eval_accuracy,
        "eval_se": book.last_eval.se if eval_accuracy is not None and book.last_eval else None,
        # mean verifier score on the held-out items: partial credit moves before exact matches do
        "eval_score": book.last_eval.score if eval_accuracy is not None and book.last_eval else None,
        "eval_accuracy_by_task": (book.last_eval.by_label() or None) if eval_accuracy is not None and book.last_eval
        else None,
        "eval_accuracy_before": book.eval_before if out.round == 0 else None,
        "eval_se_before": book.eval_before_se if out.round == 0 else None,
        "eval_size": book.eval_size if eval_accuracy is not None or out.round == 0 else None,
        "groups_local": sel.local,
        "groups_external": sel.external,
        "groups_replayed": sel.replayed,  # own groups of earlier rounds (select.replay_tokens)
        "groups_published": len(out.local) if out.wire_bytes else 0,
        "groups_received": len(out.gathered.groups),
        "groups_zero_adv": sel.dropped_zero_adv,
        "groups_informative": sum(g.informative for g in out.local),  # own groups with signal (rewards differ)
        "groups_received_informative": sum(g.informative for g in out.gathered.groups),
        "external_peers": sorted({g.source for g in sel.groups if g.is_external}),
        "peer_stats": peer_stats(out),
        "rows_trained": step.rows,
        "tokens_generated": gen.new_tokens,
        "tokens_trained": step.tokens,  # completion tokens the step trained on (own and peers')
        "rows_dash_filtered": step.rows_filtered,
        "completion_len_mean": statistics.fmean(lengths) if lengths else None,
        "gen_s": gen.seconds,
        # how generation's decode steps ran and why: graphs | eager: no CUDA | eager: capture failed: … (DecodeLoop.mode)
        "decode": getattr(parts.generator, "decode_mode", None),
        "tokens_per_s": gen.new_tokens / max(gen.seconds, 1e-9),
        "step_s": step.seconds,
        "round_s": round_s,
        "gather_s": out.gathered.waited_s,
        "wire_bytes": out.wire_bytes,
        "bytes_downloaded": out.gathered.bytes,
        "peers_seen": out.gathered.peers_seen,
        # standing of the peers seen (swarm.exchange.standing): good ones are waited for and fetched first
        "peers_good": out.gathered.standing.get("good", 0),
        "peers_new": out.gathered.standing.get("new", 0),
        "peers_backoff": out.gathered.standing.get("backoff", 0),
        "peers_backed_off": out.gathered.backed_off or None,  # a few backed-off peers → their last failure
        "fanin_skipped": out.gathered.skipped,
        "pool_size": len(parts.selector.pool),
        "pool_aged_out": out.gathered.too_old,
        "peer_groups_note": peer_groups_note(out, parts.cfg.select.external_groups),
        "drops": out.gathered.drops,
        "refused": out.gathered.refused or None,  # streams refused, bundles declined, addresses not dialled
        # gossip | dht (swarm.exchange.gossip); with swarm.gossip on, pubsub's state and counts since the last round
        "announce_transport": out.gathered.announce.get("transport"),
        "gossip": {k: v for k, v in out.gathered.announce.items() if k != "transport"} or None,
        "time": time.time(),
        **step.metrics,
        **out.extra,
    }


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
