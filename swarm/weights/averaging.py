"""Decentralized adapter averaging: FedIT (PubSwap eq. 4) without a server, on hivemind's
`DecentralizedAverager` (docs/ARCHITECTURE.md §8).

    θ ← Σ_n w_n θ_n / Σ_n w_n   for every adapter tensor separately (A and B on their own: FedIT),

over whichever peers formed a group in this call. w_n = 1 (plain FedAvg) or the samples the peer
trained on since its last aggregation. hivemind runs the average as a butterfly all-reduce: each
of the n group members reduces a 1/n part of the flattened vector, so a member sends (n−1)/n of
its vector and receives (n−1)/n back. `AverageResult.bytes` is that count for float32 tensors,
2·(n−1)/n·4·numel, computed from the partition (hivemind exposes no socket counters).

Bounded: matchmaking waits at most `timeout` (a peer that is gone or late is simply not in the
group), the all-reduce at most `allreduce_timeout_s` (a member that stops sending is dropped by
hivemind's sender/reducer timeouts), and the whole call at most their sum plus a margin. A
failed call leaves the local tensors exactly as they were and reports `averaged=False`.

The averager is a child process (hivemind forks it) that shares float32 buffers with us; the
model's own parameters are copied into them before a step and back after, so training never
races with the all-reduce. It uses the node's DHT (the same peer as the rollout transport).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import torch
from hivemind.averaging import DecentralizedAverager

log = logging.getLogger(__name__)


@dataclass
class AverageResult:
    averaged: bool  # True when an all-reduce with ≥ 1 other peer finished
    group_size: int  # peers in the all-reduce, us included (1 when it failed)
    bytes: int  # sent + received by us, computed from the butterfly partition (0 when it failed)
    drift: float | None  # ‖θ_own − θ_mean‖₂ over all tensors, before averaging (None when it failed)
    seconds: float  # wall time of the call
    error: str | None = None  # why it failed (no group in time, all-reduce error)


class AdapterAverager:
    """Weighted averaging of a fixed list of tensors with whichever peers join in time."""

    def __init__(self, tensors: list[torch.Tensor], dht, *, prefix: str, target_group_size: int,
                 min_group_size: int = 2, matchmaking_time_s: float = 5.0, request_timeout_s: float = 3.0,
                 allreduce_timeout_s: float = 60.0, start: bool = True):
        if request_timeout_s >= matchmaking_time_s:
            raise ValueError("request_timeout_s must be below matchmaking_time_s (hivemind deadlock hazard)")
        self.matchmaking_time_s = matchmaking_time_s
        self.allreduce_timeout_s = allreduce_timeout_s
        self.numel = sum(t.numel() for t in tensors)
        # hivemind averages shared-memory CPU tensors, wherever the model lives (train.device)
        self._buffers = [t.detach().to("cpu", torch.float32).clone().contiguous() for t in tensors]
        self._averager = DecentralizedAverager(
            self._buffers, dht, start=start, prefix=prefix, target_group_size=target_group_size,
            min_group_size=min_group_size, min_matchmaking_time=matchmaking_time_s,
            request_timeout=request_timeout_s, allreduce_timeout=allreduce_timeout_s,
            next_chunk_timeout=min(allreduce_timeout_s, 10.0), allow_state_sharing=False)

    def average(self, tensors: list[torch.Tensor], *, weight: float = 1.0, timeout: float = 30.0) -> AverageResult:
        """Average `tensors` in place with the peers that join within `timeout` seconds."""
        started = time.perf_counter()
        if timeout <= self.matchmaking_time_s:
            raise ValueError("timeout must exceed matchmaking_time_s (the all-reduce is scheduled after it)")
        with torch.no_grad(), self._averager.get_tensors() as bufs:
            for buf, t in zip(bufs, tensors):
                buf.copy_(t.detach())
        before = [t.detach().to("cpu", torch.float32).clone() for t in tensors]
        control = None
        try:
            control = self._averager.step(weight=float(weight), timeout=timeout, allow_retries=False, wait=False)
            gathered = control.result(timeout + self.allreduce_timeout_s + 5.0)
        except Exception as exc:  # no group in time, a member failed, or our averager died: proceed alone
            if control is not None and not control.done():
                control.cancel()
            err = f"{type(exc).__name__}: {exc}".strip()[:200]
            log.info("adapter averaging failed: %s", err)
            return AverageResult(False, 1, 0, None, time.perf_counter() - started, err or "failed")
        if not gathered:
            return AverageResult(False, 1, 0, None, time.perf_counter() - started, "no group")
        n = len(gathered)
        with torch.no_grad(), self._averager.get_tensors() as bufs:
            drift_sq = sum(float((b - a).pow(2).sum()) for b, a in zip(before, bufs))
            for t, buf in zip(tensors, bufs):
                t.copy_(buf.to(t.dtype))
        nbytes = int(2 * (n - 1) / n * 4 * self.numel)
        return AverageResult(n > 1, n, nbytes, math.sqrt(drift_sq), time.perf_counter() - started)

    def shutdown(self) -> None:
        if self._averager.is_alive():
            self._averager.shutdown()
