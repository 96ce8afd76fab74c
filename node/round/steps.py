"""The steps a round is made of, shared by every round function (node.round.loop, node.federated.round,
node.heterorl).

Each step takes the round's parts (node.round.parts.RoundParts) and returns a typed value; none of them
decides what kind of round it is.

  sample   tasks → prompts in our chat template → G completions each → verified groups (every mode opens so)
  verify   our verifier's rewards and within-group advantages for freshly generated groups
  publish  our groups as wire records to the swarm (0 bytes without a swarm)
  gather   peers' groups delivered since the last round (never lockstep): vetted by the transport,
           regenerated and re-verified here (ingest)
  train    score the selected groups under π_θ, one optimizer step, new weights into the generator
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from node.generation.base import GenerationResult
from node.round.dedup import group_digest
from node.round.groups import Group, verify_group
from node.round.ingest import ingest_for
from node.round.records import to_records
from node.round.train import StepResult, build_rows, train_step

if TYPE_CHECKING:
    from node.round.parts import RoundParts
    from node.tasks.source import Task


@dataclass
class Sample:
    """A round's own groups: the tasks drawn, their prompts, the generation and the verified groups."""

    tasks: list[Task]
    prompts: list[str]
    gen: GenerationResult
    groups: list[Group]

    @classmethod
    def empty(cls) -> Sample:
        """Nothing sampled (a learner that does not generate its own groups)."""
        return cls([], [], GenerationResult([], 0.0, 0), [])


@dataclass
class PeerTally:
    """One peer's records in a round: its model as its records name it (display only), its groups
    accepted, its records dropped by reason."""

    model: str = ""
    received: int = 0
    dropped: dict[str, int] = field(default_factory=dict)

    def __add__(self, other: PeerTally) -> PeerTally:
        return PeerTally(other.model or self.model, self.received + other.received,
                         dict(Counter(self.dropped) + Counter(other.dropped)))

    def stats(self, used: int) -> dict:
        """The peer's entry in the metrics line's `peer_stats`, with the groups trained on this round."""
        return {"model": self.model, "received": self.received, "dropped": dict(self.dropped), "used": used}


@dataclass
class Gathered:
    """Peers' groups accepted this round and the state of the exchange behind them."""

    groups: list[Group] = field(default_factory=list)  # verified here, added to the pool
    drops: dict[str, int] = field(default_factory=dict)  # reason → records or bundles dropped
    waited_s: float | None = None  # how long the round waited for them (None: no swarm)
    peers_seen: int = 0  # peers with a valid announcement younger than swarm.max_age_s
    skipped: int = 0  # valid announcements not fetched: the fan-in budget was spent
    bytes: int = 0  # bundle bytes downloaded since the last round
    too_old: int = 0  # pooled groups that aged out unused (ingest.max_age_s)
    standing: dict[str, int] = field(default_factory=dict)  # peers seen by state: good / new / backoff
    backed_off: dict[str, str] = field(default_factory=dict)  # a few backed-off peers → their last failure
    by_peer: dict[str, PeerTally] = field(default_factory=dict)  # peer → model, groups accepted, drops by reason
    refused: dict[str, int] = field(default_factory=dict)  # what the transport refused (swarm.exchange.receive.Delivery)
    announce: dict = field(default_factory=dict)  # how announcements travel (swarm.exchange.gossip.GossipReport)

    def __add__(self, other: Gathered) -> Gathered:
        drops = Counter(self.drops)
        drops.update(other.drops)
        waited = None if self.waited_s is None and other.waited_s is None else (self.waited_s or 0) + (other.waited_s or 0)
        return Gathered(self.groups + other.groups, dict(drops), waited, max(self.peers_seen, other.peers_seen),
                        self.skipped + other.skipped, self.bytes + other.bytes, self.too_old + other.too_old,
                        other.standing or self.standing, other.backed_off or self.backed_off,
                        merge_by_peer(self.by_peer, other.by_peer), dict(Counter(self.refused) + Counter(other.refused)),
                        merge_announce(self.announce, other.announce))


ANNOUNCE_STATES = frozenset({"poll_only_peers", "level", "topics"})  # integers that say how things stand, not how many happened


def merge_announce(a: dict, b: dict) -> dict:
    """Two takes' announce reports: counts added up, states (transport, pubsub, fallback, delivering, mode,
    poll_only_peers, level, topics) the later's."""
    out = {**a, **b}
    for k, v in b.items():
        if k in ANNOUNCE_STATES:
            continue
        if isinstance(v, int) and not isinstance(v, bool) and isinstance(a.get(k), int):
            out[k] = a[k] + v
    return out


def merge_by_peer(a: dict[str, PeerTally], b: dict[str, PeerTally]) -> dict[str, PeerTally]:
    """Two rounds' (or a round's two receives') per-peer tallies added up."""
    out = dict(a)
    for peer, tally in b.items():
        out[peer] = out[peer] + tally if peer in out else tally
    return out


def by_peer(records: list, groups: list[Group], peer_drops: dict[str, Counter]) -> dict[str, PeerTally]:
    """peer → its tally: the model its records name (display only), its groups accepted, its drops by reason."""
    accepted = Counter(g.source for g in groups)
    out: dict[str, PeerTally] = {}
    for r in records:
        if r.peer not in out:
            out[r.peer] = PeerTally(r.model.name or "", accepted[r.peer], dict(peer_drops.get(r.peer, {})))
    return out


def sample(parts: RoundParts, round_: int, tasks: list[Task] | None = None) -> Sample:
    """`tasks` (default: the round's B tasks from our task source) → prompts → G completions each → verified
    groups tagged with `round_`."""
    g = parts.cfg.generation
    tasks = parts.tasks.sample(round_, g.prompts_per_round) if tasks is None else tasks
    prompts = [parts.prompt_of(t) for t in tasks]
    gen = parts.generator.generate(prompts, n=g.group_size)
    return Sample(tasks, prompts, gen, verify(parts, tasks, gen, round_))


def verify(parts: RoundParts, tasks: list[Task], gen: GenerationResult, round_: int) -> list[Group]:
    """Rewards from our verifier and advantages within each group, tagged with the sampling version."""
    # the version of the weights that actually sampled (vLLM may lag by up to sync_every − 1 steps)
    sampled_by = parts.policy.version if gen.policy_version is None else gen.policy_version
    mode = parts.cfg.train.advantage
    now = parts.clock()
    return [verify_group(parts.tasks, t, comps, mode=mode, round=round_, policy_version=sampled_by, created_at=now)
            for t, comps in zip(tasks, gen.groups)]


def publish(parts: RoundParts, round_: int, sampled: Sample) -> int:
    """Wire bytes of the bundle of our sampled groups we published (0 without a swarm). Our groups are remembered
    as seen: if a peer sends one back, it is a `duplicate` (node.round.dedup)."""
    if parts.transport is None:
        return 0
    records = to_records(parts, round_, sampled.groups, sampled.prompts)
    for rec in records:
        parts.seen_groups.add(group_digest(rec.task, (c.text for c in rec.completions)), rec.created_at)
    return parts.transport.publish(records)


def gather(parts: RoundParts) -> Gathered:
    """Peers' groups delivered since the last round: regenerated, re-verified, recomputed here.

    Never lockstep: the round takes what has arrived. It waits (at most swarm.wait_s) only while
    the pool holds fewer than select.external_groups usable groups and a peer in good standing —
    one whose records this node used recently and which has failed nothing since
    (swarm.exchange.standing) — has delivered nothing since the last round. A node alone does not wait,
    nor does one whose only peers are ghosts, peers that never serve, or peers whose every record
    is dropped. Pooled groups older than ingest.max_age_s are pruned first.
    """
    if parts.transport is None:
        return Gathered()
    cfg = parts.cfg
    horizon = parts.clock() - cfg.ingest.max_age_s
    too_old = parts.selector.prune(lambda g: g.created_at >= horizon)
    missing = max(0, cfg.select.external_groups - parts.selector.usable())
    wait = cfg.swarm.wait_s if missing and parts.transport.earned() else 0.0
    gathered = receive(parts, missing if wait else 0, wait, while_earned=True)
    gathered.too_old = too_old
    return gathered


def receive(parts: RoundParts, min_records: int = 0, timeout: float = 0.0, *, while_earned: bool = False) -> Gathered:
    """What the transport delivered (waiting ≤ timeout while fewer than min_records; with `while_earned`, only
    while a peer is in good standing), through ingest; the verdict per peer goes back to the transport
    (Transport.judge)."""
    if parts.transport is None:
        return Gathered()
    delivery = parts.transport.take(min_records=min_records, timeout=timeout, while_earned=while_earned)
    result = ingest_for(parts, delivery.records)
    parts.transport.judge(verdicts(delivery.records, result.groups, result.peer_drops))
    drops = Counter(delivery.drops)
    drops.update(result.drops)
    return Gathered(result.groups, dict(drops), delivery.waited_s, delivery.peers_seen, delivery.skipped,
                    delivery.bytes, standing=delivery.standing, backed_off=delivery.backed_off,
                    by_peer=by_peer(delivery.records, result.groups, result.peer_drops),
                    refused=dict(delivery.refused), announce=dict(getattr(delivery, "announce", {})))


def verdicts(records: list, groups: list[Group], peer_drops: dict[str, Counter] | None = None
             ) -> dict[str, tuple[int, int]]:
    """peer → (its records ingest turned into groups, its records ingest dropped). A `duplicate` counts neither
    way: the group was good, another copy of it was just first (node.round.dedup)."""
    sent = Counter(r.peer for r in records)
    used = Counter(g.source for g in groups)
    dup = {peer: (peer_drops or {}).get(peer, Counter()).get("duplicate", 0) for peer in sent}
    return {peer: (used[peer], n - used[peer] - dup[peer]) for peer, n in sent.items()}


def imitate_bar(groups: list[Group], cfg) -> float | None:
    """train.imitate_bar `own`: the mean reward of the step's own rows, which an answer must beat to be
    imitated (None: no bar beyond the group's mean, imitate off, or no own rows in the step)."""
    own = [r for g in groups if not g.is_external for r in g.rewards]
    return statistics.fmean(own) if cfg.imitate and cfg.imitate_bar == "own" and own else None


def train(parts: RoundParts, groups: list[Group], regularizer=None) -> StepResult:
    """Score `groups` in our tokenization, take the round's optimizer steps, sync the generator (steps 7–9)."""
    cfg, policy = parts.cfg, parts.policy
    rows = build_rows(groups, parts.tokenizer, parts.prompt_of, chunks=cfg.train.cross_tokenizer != "sequence",
                      imitate_bar=imitate_bar(groups, cfg.train))
    with policy.lock:
        step = train_step(policy.model, policy.optimizer, rows, parts.loss_fn, cfg.train,
                          temperature=cfg.generation.temperature, pad_id=parts.tokenizer.pad_token_id,
                          regularizer=regularizer, reference=parts.reference)
        if step.stepped:
            policy.version += step.steps
            parts.generator.sync_weights(policy.model, policy.version)
    return step
