"""Training-set selection: SAPO's I local + J external groups (SAPO, Algorithm 1).

Each round the node trains on up to I of its own groups and J groups drawn uniformly from the
pool of verified external groups it has gathered and not used yet. With `backfill` (default),
when the pool holds fewer than J usable groups the missing ones are taken from our own, so the
step's batch is I + J groups whether or not peers delivered (SAPO compares configurations at a
fixed I + J). Groups whose rewards are all
equal carry zero advantage and therefore zero gradient; they are dropped *before* sampling so
the budget goes to informative groups (SAPO filters the same way). External groups stay in the
pool until used or until they fall out of the staleness window.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from node.round.config import SelectConfig
from node.round.groups import Group


@dataclass
class Selection:
    groups: list[Group]
    local: int
    external: int
    dropped_zero_adv: int


class SapoSelector:
    def __init__(self, cfg: SelectConfig, seed: int):
        self.cfg = cfg
        self.rng = random.Random(seed)
        self.pool: list[Group] = []

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
        dropped = 0
        if self.cfg.drop_zero_advantage:
            dropped = sum(not g.informative for g in local) + sum(not g.informative for g in self.pool)
            local = [g for g in local if g.informative]
            self.pool = [g for g in self.pool if g.informative]
        take = min(self.cfg.external_groups, len(self.pool))
        n_own = self.cfg.local_groups + (self.cfg.external_groups - take if self.cfg.backfill else 0)
        own = self.rng.sample(local, min(n_own, len(local)))
        picked = set(self.rng.sample(range(len(self.pool)), take))
        ext = [g for i, g in enumerate(self.pool) if i in picked]
        self.pool = [g for i, g in enumerate(self.pool) if i not in picked]
        return Selection(own + ext, len(own), len(ext), dropped)
