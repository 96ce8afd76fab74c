"""Simulated network delay for HeteroRL experiments on one machine (ingest.delay; docs/ARCHITECTURE.md §12).

The gepo paper's learner receives rollouts over a WAN whose delay it models as a clipped log-normal
(its §4.1; the authors' Time_Delay.LogNormalSampler):

    T ~ LogNormal(mu_ln, sigma_ln),   delay = clip(T − offset, min, max)        (seconds)

with mu_ln = 5.827, sigma_ln = 0.617 solving mu_ln ∓ z·sigma_ln = ln 60, ln 1920 at z = Φ⁻¹(0.9975)
= 2.807: a median of ≈ 279 s, ≈ 4.6 % of draws at 60 s and ≈ 0.2 % at 1920 s. `time_scale` shrinks
it for a run on one machine (0.01: 0.6–19.2 s). A DelayLine holds each record for its own draw and
releases it when that time has passed; the draws come from one seeded generator in arrival order,
so a test (or a bench that feeds records in a fixed order) sees the same delays every run. The line
is bounded: records beyond `max_held` are refused and counted (`delay_overflow`).
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
import statistics
from collections.abc import Iterable
from typing import Generic, TypeVar

from node.round.config import DelayConfig

T = TypeVar("T")


class DelayModel:
    """Seeded delay draws in seconds (time_scale applied)."""

    def __init__(self, cfg: DelayConfig):
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)

    def draw(self) -> float:
        c = self.cfg
        if c.kind == "none":
            return 0.0
        if c.kind == "fixed":
            return c.fixed_s * c.time_scale
        t = self.rng.lognormvariate(c.mu_ln, c.sigma_ln)
        return min(max(t - c.offset_s, c.min_s), c.max_s) * c.time_scale

    def quantile(self, p: float) -> float:
        """The p-quantile of the delay (seconds, time_scale applied), from the closed form."""
        c = self.cfg
        if c.kind != "lognormal":
            return self.draw() if c.kind == "fixed" else 0.0
        z = statistics.NormalDist().inv_cdf(p)
        t = math.exp(c.mu_ln + z * c.sigma_ln)
        return min(max(t - c.offset_s, c.min_s), c.max_s) * c.time_scale


class DelayLine(Generic[T]):
    """Holds items until their drawn delay has passed (times in seconds, any monotone clock)."""

    def __init__(self, cfg: DelayConfig):
        self.model = DelayModel(cfg)
        self.max_held = cfg.max_held
        self._heap: list[tuple[float, int, float, T]] = []  # (release time, arrival order, delay, item)
        self._order = itertools.count()
        self.released_delays: list[float] = []  # delays of the items released since the last call to take_delays

    @property
    def enabled(self) -> bool:
        return self.model.cfg.kind != "none"

    def hold(self, items: Iterable[T], now: float) -> int:
        """Hold each item for its own draw; returns how many were refused (the line was full)."""
        refused = 0
        for item in items:
            if len(self._heap) >= self.max_held:
                refused += 1
                continue
            delay = self.model.draw()
            heapq.heappush(self._heap, (now + delay, next(self._order), delay, item))
        return refused

    def release(self, now: float) -> list[T]:
        """Items whose delay has passed, in release order."""
        out = []
        while self._heap and self._heap[0][0] <= now:
            _, _, delay, item = heapq.heappop(self._heap)
            self.released_delays.append(delay)
            out.append(item)
        return out

    def next_release(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def held(self) -> int:
        return len(self._heap)

    def take_delays(self) -> list[float]:
        out, self.released_delays = self.released_delays, []
        return out
