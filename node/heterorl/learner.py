"""One round of a learner (HeteroRL): train on samplers' rollouts, broadcast the new weights.

    1. announce   at start (and after every `publish_every` steps) our weights go out (node.heterorl.state)
    2. own        optionally (heterorl.generate_own) B groups of our own, sampled with the current weights
    3. gather     samplers' records as they arrive (never lockstep): from the accepted peers only, held
                  by the delay simulator (ingest.delay), then bounded in staleness — learner version −
                  record version ≤ ingest.max_delay_steps, else `stale_version` (a version ahead of ours,
                  from weights we no longer hold after a restart: `future_version`) — then regenerated
                  and re-verified (ingest); waits ≤ heterorl.wait_s for select.external_groups usable groups
    4. select     I own + J pooled groups; pooled groups that went stale while waiting are dropped first
    5. step       the configured loss against each record's own μ; one optimizer step (or the PPO shape)
    6. publish    the new weights, when due
    7. record     metrics: staleness of the groups trained (mean, p50, p95, max, counts), delays drawn,
                  records held, drops by reason; held-out eval and checkpoint when due

A record's version is the learner version its sampler loaded (node.heterorl.sampler), so the gap is
measured in our optimizer steps, as the gepo paper's max_diff_step (docs/ARCHITECTURE.md §12).
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from node.heterorl.state import role_state
from node.round.ingest import ingest_for
from node.round.report import RoundOutcome, finish_round
from node.round.steps import Gathered, Sample, sample, train
from protocols.records import RolloutRecord

if TYPE_CHECKING:
    from node.round.record import RoundRecord
    from node.heterorl.state import LearnerState
    from node.round.parts import RoundHost, RoundParts

_SLICE_S = 0.5  # longest single wait inside a gather: a held record's release is never missed by more


def run_learner_round(node: RoundHost, round_: int) -> RoundRecord:
    started = time.perf_counter()
    parts = node.parts
    st: LearnerState = role_state(parts)
    extra: dict[str, Any] = st.publish(parts) if st.publish_due(parts) else {}  # 1
    own = sample(parts, round_) if parts.cfg.heterorl.generate_own else Sample.empty()  # 2
    gathered = gather_samplers(parts, st)  # 3
    selection = parts.selector.select(own.groups, [])  # 4 (gather filled the pool)
    gaps = [parts.policy.version - grp.policy_version for grp in selection.groups if grp.is_external]
    step = train(parts, selection.groups)  # 5
    if step.stepped and st.publish_due(parts):  # 6
        extra.update(st.publish(parts))
    extra.update(staleness_metrics(gaps))
    delays = st.delay.take_delays()
    extra.update(delay_held=st.delay.held(), delay_s_mean=statistics.fmean(delays) if delays else None,
                 delay_s_max=max(delays, default=None))
    outcome = RoundOutcome(round_, started, own.groups + gathered.groups, own.gen, selection, step, gathered=gathered,
                           extra=extra)
    return finish_round(parts, outcome)  # 7


def staleness_metrics(gaps: list[int]) -> dict[str, Any]:
    """The delay distribution (in our optimizer steps) of the peers' groups one step trained on."""
    if not gaps:
        return {"staleness_mean": None, "staleness_p50": None, "staleness_p95": None, "staleness_max": None,
                "staleness_counts": {}}
    ordered = sorted(gaps)
    return {"staleness_mean": statistics.fmean(ordered), "staleness_p50": ordered[len(ordered) // 2],
            "staleness_p95": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
            "staleness_max": ordered[-1], "staleness_counts": {str(k): v for k, v in sorted(Counter(gaps).items())}}


def staleness_reason(version: int, record_version: int, max_delay: int | None) -> str | None:
    """Why a record sampled with `record_version` is unusable at learner `version` (None: usable)."""
    gap = version - record_version
    if gap < 0:
        return "future_version"
    if max_delay is not None and gap > max_delay:
        return "stale_version"
    return None


def gather_samplers(parts: RoundParts, st: LearnerState) -> Gathered:
    """Samplers' records delivered since the last round, through the delay line, the staleness bound and ingest
    (module docstring, step 3); waits at most heterorl.wait_s while fewer than J usable groups are pooled."""
    cfg, policy = parts.cfg, parts.policy
    max_delay = cfg.ingest.max_delay_steps
    drops: Counter = Counter()
    horizon = time.time() - cfg.ingest.max_age_s
    too_old = parts.selector.prune(lambda grp: grp.created_at >= horizon)
    drops["stale_version"] += parts.selector.prune(
        lambda grp: staleness_reason(policy.version, grp.policy_version, max_delay) is None)
    want = cfg.select.external_groups
    started = time.monotonic()
    deadline = started + cfg.heterorl.wait_s
    out = Gathered(waited_s=0.0)
    while True:
        need, left = parts.selector.usable() < want, deadline - time.monotonic()
        wait = 0.0
        if need and left > 0:
            nxt = st.delay.next_release()
            wait = min(_SLICE_S, left, _SLICE_S if nxt is None else max(0.01, nxt - time.time()))
        delivery = parts.transport.take(min_records=1 if wait else 0, timeout=wait)
        drops.update(delivery.drops)
        out.bytes += delivery.bytes
        out.skipped += delivery.skipped
        out.peers_seen = max(out.peers_seen, delivery.peers_seen)
        records = _admit(delivery.records, st, drops)
        if st.delay.enabled:
            drops["delay_overflow"] += st.delay.hold(records, time.time())
            records = st.delay.release(time.time())
        fresh = []
        for rec in records:
            reason = staleness_reason(policy.version, rec.policy_version, max_delay)
            if reason:
                drops[reason] += 1
            else:
                fresh.append(rec)
        result = ingest_for(parts, fresh)  # the receive guard and work bounds of every node
        drops.update(result.drops)
        parts.selector.add_external(result.groups)
        out.groups.extend(result.groups)
        if not wait or parts.selector.usable() >= want or time.monotonic() >= deadline:
            break
    out.waited_s = time.monotonic() - started
    out.too_old = too_old
    out.drops = {k: v for k, v in drops.items() if v}
    return out


def _admit(records: list[RolloutRecord], st: LearnerState, drops: Counter) -> list[RolloutRecord]:
    """Records from the accepted samplers (heterorl.accept_from; empty accepts every peer)."""
    if not st.accept_from:
        return records
    kept = [r for r in records if r.peer in st.accept_from]
    drops["not_sampler"] += len(records) - len(kept)
    return kept
