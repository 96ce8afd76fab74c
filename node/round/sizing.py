"""`train.micro_batch_rows: auto` and `train.gradient_checkpointing: auto`: sized once at start, by measurement.

The probe: the training forward and backward (node.round.logprobs, gradients into the parameters)
of 1 and then 2 synthetic rows of the longest length a step can hold — the longest prompt of a
sample of the node's tasks plus `generation.max_new_tokens` — measuring on the training device
(`measure`: CUDA's allocator statistics; on the CPU, torch.profiler's allocation events) the
activations each forward keeps for its backward and the peak of the whole pass. A row then
costs `per_row = max(peak(2) − peak(1), 2 · (kept(2) − kept(1)))` — in the backward pass the
gradient of a kept activation lives beside it, while at one or two rows the parameters' gradients
may set the peak alone — and a micro-batch of m rows peaks at about `peak(1) + (m − 1) · per_row`.
With checkpointing a row keeps only the layers' inputs (twice, for their gradients), plus one
layer's activations recomputed at a time in the backward pass (per_row / layers).

The budget: the device's free memory (CUDA: free plus what torch holds unused; CPU: MemAvailable)
less what is not allocated yet — AdamW's two moments of every trainable parameter and the
temporaries of its step (`optimizer_bytes`: on a GPU torch's AdamW updates all parameters at once,
`_foreach_sqrt` of the second moments is one more copy of them), and the `hf` decode loop's KV
caches, per-step logits and CUDA-graph memory pools (node.generation.hf: `HFGenerator.reserve_bytes`)
— less a tenth for fragmentation. `fits` is the most rows with fixed + rows × per_row within it, at most the rows
of a whole step (select.local_groups + external_groups groups of group_size). Without CUDA the
probe runs under torch.profiler and takes a few training passes' time (SmolLM2-135M: about a
minute on 2 CPU cores); the checkpointed probe runs only when checkpointing is chosen.

The rules (`needs_checkpointing`, `fits`):
  checkpointing  true/false as configured; auto: off when the configured micro-batch fits without
                 it (micro_batch_rows auto: when at least min(8, step rows) rows fit without it),
                 else on — so a step never pays for recomputation it does not need
  micro-batch    the configured number; auto: fits(per_row) under the chosen checkpointing
                 (at least 1, with a warning when not even one row fits)
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass

import torch

from node.models.device import checkpointing, innermost, set_checkpointing
from node.round.logprobs import TokenRow, score_rows
from swarm.host.meminfo import available_bytes

log = logging.getLogger(__name__)

MIN_ROWS_WITHOUT_CHECKPOINTING = 8


@dataclass
class MemoryPlan:
    micro_batch_rows: int
    checkpointing: bool
    why: str

    def describe(self) -> str:
        return (f"micro_batch_rows {self.micro_batch_rows}, gradient checkpointing "
                f"{'on' if self.checkpointing else 'off'} ({self.why})")


def free_bytes(device: torch.device) -> int | None:
    """Memory this process could still allocate on `device` (None when it cannot be told)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return available_bytes()


@contextlib.contextmanager
def _quiet_fd2():
    """The profiler's native start/stop lines go to file descriptor 2: silence them for its duration."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def measure(forward, backward, device: torch.device) -> tuple[int, int]:
    """(bytes live on `device` after forward() beyond those live before it, the most bytes live at once
    during forward() and backward()). CUDA: the allocator's statistics; CPU: torch.profiler's
    allocation events (the CPU allocator keeps no statistics)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        forward()
        torch.cuda.synchronize(device)
        kept = torch.cuda.memory_allocated(device) - base
        backward()
        torch.cuda.synchronize(device)
        return max(0, kept), max(0, torch.cuda.max_memory_allocated(device) - base)
    from torch.profiler import ProfilerActivity, profile, record_function

    with _quiet_fd2(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        forward()
        with record_function("rlswarm.backward"):
            backward()
    events = prof.profiler.kineto_results.events()
    split = min(e.start_ns() for e in events if e.name() == "rlswarm.backward")
    changes = sorted((e.start_ns(), e.nbytes()) for e in events
                     if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU)
    live = peak = kept = 0
    for start, nbytes in changes:
        live += nbytes
        peak = max(peak, live)
        if start < split:
            kept = live
    return max(0, kept), peak


def step_cost(model: torch.nn.Module, rows: int, row_tokens: int, completion_tokens: int,
              pad_id: int) -> tuple[int, int]:
    """(activations kept for the backward pass, peak bytes) of one micro-batch's forward and backward over
    `rows` rows of `row_tokens` tokens."""
    completion = min(completion_tokens, row_tokens - 1)
    probe = [TokenRow([pad_id] * (row_tokens - completion), [pad_id] * completion) for _ in range(rows)]
    device = next(model.parameters()).device
    out = []

    def forward():
        logp, mask = score_rows(model, probe, 1.0, pad_id)
        out.append((logp * mask).sum())

    was_training = model.training
    model.train()
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            return measure(forward, lambda: out.pop().backward(), device)
    finally:
        model.zero_grad(set_to_none=True)
        model.train(was_training)


def optimizer_bytes(model: torch.nn.Module) -> int:
    """What AdamW's first step allocates beyond the parameters and their gradients: its two moments and,
    at the step's peak, one more copy of the second moments (the multi-tensor step's square roots), and a
    step counter per parameter tensor."""
    return sum(3 * p.numel() * p.element_size() + 64 for p in model.parameters() if p.requires_grad)


def fits(per_row: int, fixed: int, budget: int, step_rows: int) -> int:
    """Most rows (≤ step_rows) whose micro-batch, fixed + rows × per_row bytes, stays within budget."""
    return max(0, min(step_rows, (budget - fixed) // max(per_row, 1)))


def needs_checkpointing(per_row: int, fixed: int, budget: int, step_rows: int, cfg) -> bool:
    """The train.gradient_checkpointing rule (module doc), given the cost of a row without it."""
    if cfg.gradient_checkpointing != "auto":
        return bool(cfg.gradient_checkpointing)
    want = cfg.micro_batch_rows
    need = want if want != "auto" else min(MIN_ROWS_WITHOUT_CHECKPOINTING, step_rows)
    return fits(per_row, fixed, budget, step_rows) < need


def plan_memory(model: torch.nn.Module, cfg, *, row_tokens: int, completion_tokens: int, step_rows: int,
                pad_id: int, reserve: int = 0, budget: int | None = None) -> MemoryPlan | None:
    """Resolve the `auto` train.* fields by measurement (None when neither is auto).

    `reserve`: bytes that will be allocated later outside the step (node.round.sizing's module doc);
    `budget` overrides the measured free memory (tests)."""
    if cfg.micro_batch_rows != "auto" and cfg.gradient_checkpointing != "auto":
        return None
    device = next(model.parameters()).device
    if budget is None:
        free = free_bytes(device)
        if free is None:
            return MemoryPlan(16 if cfg.micro_batch_rows == "auto" else cfg.micro_batch_rows,
                              cfg.gradient_checkpointing is True, f"free memory on {device} unknown: defaults")
        budget = int(0.9 * (free - optimizer_bytes(model) - reserve))
    before = checkpointing(model)
    gib = 1 << 30
    try:
        set_checkpointing(model, False)
        if device.type == "cuda":  # cuBLAS workspaces and the like, allocated by the first pass
            step_cost(model, 1, min(row_tokens, 8), min(completion_tokens, 4), pad_id)
        (kept_1, peak_1), (kept_2, peak_2) = (step_cost(model, m, row_tokens, completion_tokens, pad_id)
                                              for m in (1, 2))
        per_row = max(peak_2 - peak_1, 2 * (kept_2 - kept_1), 1)
        fixed = max(peak_1 - per_row, 0)
        why = f"{budget / gib:.1f} GiB for micro-batches of rows of {row_tokens} tokens, {per_row / gib:.2f} GiB a row"
        ckpt = needs_checkpointing(per_row, fixed, budget, step_rows, cfg)
        if ckpt:
            set_checkpointing(model, True)
            (ck_1, _), (ck_2, _) = (step_cost(model, m, row_tokens, completion_tokens, pad_id) for m in (1, 2))
            layers = getattr(innermost(model).config, "num_hidden_layers", 1) or 1
            per_row = 2 * max(ck_2 - ck_1, 1) + per_row // layers  # + one layer recomputed at a time
            why += f", {per_row / gib:.2f} GiB checkpointed"
    finally:
        set_checkpointing(model, before)
    rows = cfg.micro_batch_rows
    if rows == "auto":
        rows = fits(per_row, fixed, budget, step_rows)
        if rows < 1:
            log.warning("not even one row of %d tokens fits the measured memory (%s); micro_batch_rows 1",
                        row_tokens, why)
            rows = 1
    set_checkpointing(model, ckpt)
    return MemoryPlan(rows, ckpt, why)
