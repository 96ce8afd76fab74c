"""Turn peers' records into verified groups, trusting nothing but the TaskRef (docs/ARCHITECTURE.md §4).

For every external record this node: checks its age (swarm time, never rounds), regenerates the task from its TaskRef
(allow-listed datasets/configs only), checks the sender's prompt contains the regenerated
question, decides whether the sender's token ids and per-token μ apply (same tokenizer
fingerprint) or only the text does (docs/ARCHITECTURE.md §6), re-scores every completion with its own
verifier and recomputes advantages within the group. Claimed rewards are ignored.
A record that fails any check is dropped with a counted reason; nothing here raises.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass

from node.round.config import IngestConfig
from node.round.groups import Group, verify_group
from node.tasks.source import TaskError, TaskSource
from protocols.records import RolloutRecord


@dataclass
class IngestResult:
    groups: list[Group]
    drops: Counter[str]


def ingest(
    records: list[RolloutRecord],
    *,
    tasks: TaskSource,
    cfg: IngestConfig,
    own_fingerprint: str,
    own_vocab_size: int,
    advantage_mode: str = "std",
    now: float | None = None,
) -> IngestResult:
    now = time.time() if now is None else now
    groups: list[Group] = []
    drops: Counter[str] = Counter()
    for rec in records:
        reason = _stale(rec, cfg, now) or _malformed(rec, cfg)
        if reason:
            drops[reason] += 1
            continue
        try:
            task = tasks.check_external(rec.task)
        except TaskError as exc:
            drops[exc.reason] += 1
            continue
        if task.question not in rec.prompt:
            drops["prompt_mismatch"] += 1
            continue
        aligned = rec.model.tokenizer == own_fingerprint
        if aligned and any(t >= own_vocab_size for c in rec.completions for t in c.token_ids):
            drops["bad_token_id"] += 1
            continue
        groups.append(
            verify_group(
                tasks,
                task,
                list(rec.completions),
                mode=advantage_mode,
                source=rec.peer,
                aligned=aligned,
                round=rec.round,
                policy_version=rec.policy_version,
                created_at=rec.created_at,
            )
        )
    return IngestResult(groups, drops)


def _stale(rec: RolloutRecord, cfg: IngestConfig, now: float) -> str | None:
    if now - rec.created_at > cfg.max_age_s:
        return "stale_age"
    if rec.created_at - now > cfg.max_clock_skew_s:
        return "future_timestamp"
    return None


def _malformed(rec: RolloutRecord, cfg: IngestConfig) -> str | None:
    if len(rec.completions) < cfg.min_group_size:
        return "group_too_small"
    for c in rec.completions:
        if not c.token_ids or any(not math.isfinite(lp) or lp > 0 for lp in c.logprobs):
            return "bad_logprobs"
    return None
