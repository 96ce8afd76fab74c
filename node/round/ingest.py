"""Turn peers' records into verified groups, trusting nothing but the TaskRef (docs/ARCHITECTURE.md §4).

For every external record this node, in this order, cheapest first and before any work a peer
could inflate:
  1. freshness (age in swarm time and clock skew, never rounds) and shape (group size, logprobs);
  2. regenerates the task from its TaskRef (a plain, bounded config on the allow-list only) and
     checks the sender's prompt contains the regenerated question;
  3. decides whether the sender's token ids and per-token μ apply (same tokenizer fingerprint,
     docs/ARCHITECTURE.md §6) or only the text does;
  4. bounds the work: every completion at most `max_completion_tokens` of the sender's tokens
     and, when unaligned, at most RETOKENISED_SLACK times that in our re-tokenisation (its text
     bounded in characters before it is tokenised), and our prompt + completion within the
     model's context;
  5. aligned ids must say what the text says: our tokenizer decodes the ids exactly as our own
     generation does (skip_special_tokens=True) and must give the sender's text, because the
     reward is read from the text and the gradient from the ids;
  6. re-scores every completion with its own verifier (bounded: node.tasks.source) and
     recomputes advantages within the group. Claimed rewards are ignored.
A group already accepted from any peer, or published by this node, is dropped as `duplicate`
before any of that work (node.round.dedup).
A record that fails any check is dropped with a counted reason (docs/PROTOCOL.md §8.1). Every
record is processed behind one guard: an exception on peer data is a bug, and it costs that
record (`internal_error`, logged), never the round.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from node.round.config import IngestConfig
from node.round.dedup import SeenGroups, group_digest
from node.round.groups import Group, verify_group
from node.tasks.source import Task, TaskError, TaskSource
from protocols.records import RolloutRecord

if TYPE_CHECKING:
    from node.round.parts import RoundParts

log = logging.getLogger(__name__)

# A token of any tokenizer this project meets decodes to at most a few dozen characters; text
# longer than this many characters per allowed token cannot fit the budget and is not tokenised.
MAX_CHARS_PER_TOKEN = 32
# Another tokenizer's text re-tokenised by ours: how much longer than the budget it may come out
# (two BPE vocabularies of different sizes, or a digit-level one, differ by well under 4×).
RETOKENISED_SLACK = 4


@dataclass
class IngestResult:
    groups: list[Group]
    drops: Counter[str]
    peer_drops: dict[str, Counter[str]] = field(default_factory=dict)  # peer → reason → records dropped


@dataclass(frozen=True)
class OwnModel:
    """What a receiver knows about its own model to bound and cross-check peers' completions."""

    tokenizer: Any  # ours: decodes aligned ids, re-tokenises unaligned text
    prompt_of: Callable[[Task], str]  # our rendering of a task's prompt (what we would train on)
    max_completion_tokens: int  # longest completion we accept, in the tokens we would train on
    max_context: int | None = None  # prompt + completion tokens the model takes (None: unbounded)


def ingest_for(parts: RoundParts, records: list[RolloutRecord], now: float | None = None) -> IngestResult:
    """`ingest` with everything taken from the round's parts: tasks, config, tokenizer, budgets and the groups
    seen before."""
    return ingest(records, tasks=parts.tasks, cfg=parts.cfg.ingest,
                  own_fingerprint=parts.fingerprint, own_vocab_size=parts.vocab_size,
                  advantage_mode=parts.cfg.train.advantage, now=parts.clock() if now is None else now,
                  own=own_model(parts), seen=parts.seen_groups)


def own_model(parts: RoundParts) -> OwnModel:
    limit = parts.cfg.ingest.max_completion_tokens or parts.cfg.generation.max_new_tokens
    config = getattr(parts.model, "config", None)
    context = getattr(config, "max_position_embeddings", None)
    return OwnModel(parts.tokenizer, parts.prompt_of, limit, context if isinstance(context, int) else None)


def ingest(
    records: list[RolloutRecord],
    *,
    tasks: TaskSource,
    cfg: IngestConfig,
    own_fingerprint: str,
    own_vocab_size: int,
    advantage_mode: str = "std",
    now: float | None = None,
    own: OwnModel | None = None,
    seen: SeenGroups | None = None,
) -> IngestResult:
    """Verified groups and drop counts; `own` None skips the checks that need our tokenizer (tests); `seen`: the
    groups accepted before (None: no deduplication), to which the accepted ones are added."""
    now = time.time() if now is None else now
    groups: list[Group] = []
    drops: Counter[str] = Counter()
    peer_drops: dict[str, Counter[str]] = {}
    for rec in records:
        try:
            digest = group_digest(rec.task, (c.text for c in rec.completions)) if seen is not None else None
            if digest is not None and digest in seen:
                outcome = "duplicate"
            else:
                outcome = _one(rec, tasks=tasks, cfg=cfg, own_fingerprint=own_fingerprint,
                               own_vocab_size=own_vocab_size, advantage_mode=advantage_mode, now=now, own=own)
                if digest is not None and not isinstance(outcome, str):
                    seen.add(digest, now)
        except Exception as exc:  # noqa: BLE001 — a peer's record must never end the round
            outcome = "internal_error"
            if not drops["internal_error"]:
                log.warning("ingest: a record from %s raised %s: %.200s", rec.peer[:16],
                            type(exc).__name__, exc)
        if isinstance(outcome, str):
            drops[outcome] += 1
            peer_drops.setdefault(rec.peer, Counter())[outcome] += 1
        else:
            groups.append(outcome)
    return IngestResult(groups, drops, peer_drops)


def _one(rec: RolloutRecord, *, tasks: TaskSource, cfg: IngestConfig, own_fingerprint: str,
         own_vocab_size: int, advantage_mode: str, now: float, own: OwnModel | None) -> Group | str:
    """The verified group of one record, or the reason it is dropped."""
    reason = _stale(rec, cfg, now) or _malformed(rec, cfg)
    if reason:
        return reason
    try:
        task = tasks.check_external(rec.task)
    except TaskError as exc:
        return exc.reason
    if task.question not in rec.prompt:
        return "prompt_mismatch"
    aligned = rec.model.tokenizer == own_fingerprint
    if aligned and any(t >= own_vocab_size for c in rec.completions for t in c.token_ids):
        return "bad_token_id"
    if own is not None:
        reason = _over_budget(rec, task, aligned, own) or (_ids_disagree(rec, own) if aligned else None)
        if reason:
            return reason
    return verify_group(tasks, task, list(rec.completions), mode=advantage_mode, source=rec.peer,
                        aligned=aligned, round=rec.round, policy_version=rec.policy_version,
                        created_at=rec.created_at)


def _stale(rec: RolloutRecord, cfg: IngestConfig, now: float) -> str | None:
    if not now - rec.created_at <= cfg.max_age_s:  # written so that NaN fails too
        return "stale_age"
    if not rec.created_at - now <= cfg.max_clock_skew_s:
        return "future_timestamp"
    return None


def _malformed(rec: RolloutRecord, cfg: IngestConfig) -> str | None:
    if len(rec.completions) < cfg.min_group_size:
        return "group_too_small"
    for c in rec.completions:
        if not c.token_ids or any(not math.isfinite(lp) or lp > 0 for lp in c.logprobs):
            return "bad_logprobs"
    return None


def _over_budget(rec: RolloutRecord, task: Task, aligned: bool, own: OwnModel) -> str | None:
    """`completion_too_long` / `context_overflow` when a completion costs more than we would spend.

    Every completion: at most `max_completion_tokens` of the sender's tokens. Unaligned ones are
    trained on in our re-tokenisation, which another tokenizer may make longer: that is allowed
    up to RETOKENISED_SLACK times the budget, and text too long to fit is not tokenised at all.
    """
    limit = own.max_completion_tokens
    lengths = []
    for c in rec.completions:
        if len(c.token_ids) > limit:
            return "completion_too_long"
        if aligned:
            n = len(c.token_ids)
        elif len(c.text) > limit * RETOKENISED_SLACK * MAX_CHARS_PER_TOKEN:
            return "completion_too_long"  # not worth tokenising
        else:  # what node.round.train.build_rows will train on
            n = len(own.tokenizer(c.text, add_special_tokens=False)["input_ids"]) + (c.finish_reason == "stop")
            if n > limit * RETOKENISED_SLACK:
                return "completion_too_long"
        lengths.append(n)
    if own.max_context is not None:
        prompt = len(own.tokenizer(own.prompt_of(task), add_special_tokens=False)["input_ids"])
        if prompt + max(lengths) > own.max_context:
            return "context_overflow"
    return None


def _ids_disagree(rec: RolloutRecord, own: OwnModel) -> str | None:
    """`ids_text_mismatch` unless each completion's ids decode (as our generation decodes) to its text."""
    for c in rec.completions:
        if own.tokenizer.decode(list(c.token_ids), skip_special_tokens=True) != c.text:
            return "ids_text_mismatch"
    return None
