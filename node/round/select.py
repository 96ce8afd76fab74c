"""Training-set selection: SAPO's I local + J external groups (SAPO, Algorithm 1), and two options.

Each round the node trains on up to I of its own groups and J groups drawn uniformly from the
pool of verified external groups it has gathered and not used yet. With `backfill` (default),
when the pool holds fewer than J usable groups the missing ones are taken from our own, so the
step's batch is I + J groups whether or not peers delivered (SAPO compares configurations at a
fixed I + J). Groups whose rewards are all
equal carry zero advantage and therefore zero gradient; they are dropped *before* sampling so
the budget goes to informative groups (SAPO filters the same way). External groups stay in the
pool until used or until they fall out of the staleness window.

Two departures from SAPO, off by default (docs/ARCHITECTURE.md §5):
  pool_backfill  the mirror of backfill: when fewer than I of our own groups are informative (a
                 binary reward on tasks we mostly fail), more peers' groups fill the step, up to
                 I + J in all.
  prefer: need   pooled groups are taken first from the task kinds (dataset + config) where our own
                 recent mean reward is lowest (an exponential average over our own groups, α 0.1;
                 a kind we have never drawn counts as 0): the tasks our own groups fail on, where a
                 peer's success is the only signal we get (SAPO's "aha" path). Ties at random.

Two more, off by default, for steps that take what a larger swarm offers (docs/ARCHITECTURE.md §5):
  external_tokens  a budget of peers' completion tokens per step in place of J: pooled groups
                 (informative ones, when zero-advantage groups are dropped), in `prefer` order, are
                 taken until their completion tokens (counted in the sender's tokenization) reach the
                 budget; the last one taken may cross it. `backfill` still counts against J (fewer
                 than J taken: own groups fill up to I + J); `pool_backfill` does not apply.
  prefer: useful pooled groups ordered by, in turn: (1) on a task kind where our own groups of the
                 latest round that drew it solved nothing (no completion reached the verifier's full
                 score 1; a kind we have never drawn counts as unsolved) before the rest; (2) higher variance of the group's
                 rewards first (the variance of its advantages before the std normalisation, which
                 makes every informative group's 1); (3) newer first (created_at); ties at random.

One more, off by default, for the solo control at equal trained tokens (docs/benchmarks/learning.md §13I):
  replay_tokens  after the I own and J peers' groups, our own informative groups of earlier rounds (at most
                 `replay_pool`, oldest out first) fill the step until its completion tokens reach the
                 budget: fewest replays first, newest among equals, each taken while the budget's gap is more
                 than half its tokens (so the step lands nearest the budget, not always above it). A replayed
                 group keeps the μ it was sampled with, so an off-policy loss (F-TIS) weighs it against the
                 policy that sampled it. `replay_to` is the budget of the next step (a bench sets it per round).
  replay_repeat  how often one group may be replayed within one step (default 1). Above 1 a group taken twice
                 counts twice in the step's token mean (its rows weigh double): the way a node alone with few groups
                 of its own (early rounds) reaches a large budget.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from node.round.config import SelectConfig
from node.round.groups import Group
from node.tasks.source import task_label

NEED_ALPHA = 0.1  # weight of a new own group in the per-kind average reward (prefer: need)


@dataclass
class Selection:
    groups: list[Group]
    local: int
    external: int
    dropped_zero_adv: int
    replayed: int = 0  # own groups of earlier rounds (select.replay_tokens), at the end of `groups`

    @classmethod
    def empty(cls) -> Selection:
        """Nothing selected (a round that does not train)."""
        return cls([], 0, 0, 0)


def kind_of(group: Group) -> str:
    """A group's task kind: dataset and config (difficulty bands of one dataset are different kinds)."""
    return task_label(group.task.ref, {group.task.ref.dataset})


class SapoSelector:
    def __init__(self, cfg: SelectConfig, seed: int):
        self.cfg = cfg
        self.rng = random.Random(seed)
        self.pool: list[Group] = []
        self.own_reward: dict[str, float] = {}  # task kind → recent mean reward of our own groups (prefer: need)
        self.own_solved: dict[str, bool] = {}  # task kind → our latest own group had a full score (prefer: useful)
        self.replay: list[list] = []  # [times replayed, group]: own informative groups of earlier rounds, oldest first
        self.replay_to = cfg.replay_tokens  # the next step's budget of completion tokens with replay (0: none)

    def add_external(self, groups: list[Group]) -> None:
        self.pool.extend(groups)
        del self.pool[: max(0, len(self.pool) - self.cfg.pool_size)]  # oldest first out

    def usable(self) -> int:
        """Pooled groups `select` could draw (informative ones when zero-advantage groups are dropped)."""
        return sum(g.informative for g in self.pool) if self.cfg.drop_zero_advantage else len(self.pool)

    def prune(self, keep) -> int:
        """Remove pooled groups for which `keep(group)` is False; returns how many."""
        before = len(self.pool)
        self.pool = [g for g in self.pool if keep(g)]
        return before - len(self.pool)

    def select(self, local: list[Group], external: list[Group] = ()) -> Selection:
        """Add this round's fresh `external` groups to the pool, then draw I local + J pooled groups."""
        self.add_external(list(external))
        self._observe(local)
        dropped = 0
        if self.cfg.drop_zero_advantage:
            dropped = sum(not g.informative for g in local) + sum(not g.informative for g in self.pool)
            local = [g for g in local if g.informative]
            self.pool = [g for g in self.pool if g.informative]
        i, j = self.cfg.local_groups, self.cfg.external_groups
        if self.cfg.external_tokens:
            picked = self._budget(self._pick(len(self.pool)))
            take = len(picked)
        else:
            own_short = max(0, i - len(local)) if self.cfg.pool_backfill and j else 0
            take = min(j + own_short, len(self.pool))
        n_own = i + (max(0, j - take) if self.cfg.backfill else 0)
        own = self.rng.sample(local, min(n_own, len(local)))
        if not self.cfg.external_tokens:
            picked = set(self._pick(take))
        ext = [g for k, g in enumerate(self.pool) if k in picked]
        self.pool = [g for k, g in enumerate(self.pool) if k not in picked]
        again = self._replayed(own + ext) if self.replay_to else []
        if self.replay_to:
            self.replay += [[0, g] for g in local if g.informative]
            del self.replay[: max(0, len(self.replay) - self.cfg.replay_pool)]
        return Selection(own + ext + again, len(own), len(ext), dropped, len(again))

    def _replayed(self, step: list[Group]) -> list[Group]:
        """Own groups of earlier rounds that bring the step's completion tokens nearest `replay_to`, each at most
        `replay_repeat` times in this step (the next one is always the least replayed so far, newest among equals)."""
        tokens = sum(len(c.token_ids) for g in step for c in g.completions)
        out, times = [], [0] * len(self.replay)  # times: how often each entry was taken in this step
        while True:
            left = [k for k in range(len(self.replay)) if times[k] < self.cfg.replay_repeat]
            if not left:
                break
            k = min(left, key=lambda k: (self.replay[k][0], -self.replay[k][1].round))  # the first such, in list order
            entry = self.replay[k]
            size = sum(len(c.token_ids) for c in entry[1].completions)
            if self.replay_to - tokens <= size / 2:
                break
            entry[0] += 1
            times[k] += 1
            tokens += size
            out.append(entry[1])
        return out

    def _pick(self, take: int) -> list[int]:
        """Indexes of `take` pooled groups in `prefer` order: at random, neediest kinds first (need), or
        unsolved kinds, then reward variance, then freshness (useful)."""
        if self.cfg.prefer == "uniform":
            return self.rng.sample(range(len(self.pool)), take)
        if self.cfg.prefer == "useful":
            key = self._usefulness
        else:
            def key(g: Group) -> tuple:
                return (self.own_reward.get(kind_of(g), 0.0), self.rng.random())
        return sorted(range(len(self.pool)), key=lambda k: key(self.pool[k]))[:take]

    def _usefulness(self, g: Group) -> tuple:
        """Sort key of prefer: useful (smaller first): our own latest groups on its kind solved something,
        minus its reward variance, minus its creation time, a random tie-break."""
        mean = sum(g.rewards) / len(g.rewards)
        var = sum((r - mean) ** 2 for r in g.rewards) / len(g.rewards)
        return (self.own_solved.get(kind_of(g), False), -var, -g.created_at, self.rng.random())

    def _budget(self, order: list[int]) -> set[int]:
        """Indexes taken from `order` until their completion tokens reach select.external_tokens."""
        picked, tokens = set(), 0
        for k in order:
            if tokens >= self.cfg.external_tokens:
                break
            picked.add(k)
            tokens += sum(len(c.token_ids) for c in self.pool[k].completions)
        return picked

    def _observe(self, local: list[Group]) -> None:
        """Update the per-kind average reward of our own groups (prefer: need) or whether our latest own
        groups of a kind solved anything (prefer: useful)."""
        if self.cfg.prefer == "useful":
            solved: dict[str, bool] = {}
            for g in local:
                solved[kind_of(g)] = solved.get(kind_of(g), False) or max(g.rewards) >= 1.0
            self.own_solved.update(solved)
            return
        if self.cfg.prefer != "need":
            return
        for g in local:
            mean = sum(g.rewards) / len(g.rewards)
            kind = kind_of(g)
            old = self.own_reward.get(kind)
            self.own_reward[kind] = mean if old is None else (1 - NEED_ALPHA) * old + NEED_ALPHA * mean
