"""One optimizer step on the selected groups (docs/ARCHITECTURE.md, steps 7–8 of a round).

  rows      every completion of every selected group, in *this node's* tokenization: a peer's
            token ids and per-token μ when its tokenizer fingerprint equals ours, else the
            completion text re-tokenised and only its sequence log μ(y) kept (docs/ARCHITECTURE.md §6)
  DASH      rows with |A_i| < threshold are dropped before any forward pass (at least one kept)
  score     log π_θ per token in micro-batches of whole groups (GEPO needs a group together);
            π_old = sg(π_θ) of that same forward: one optimizer step per round means the policy
            that scores is the policy at the start of the step, so no second forward is needed
  loss      `losses.build_loss_from_config(cfg)`; every micro-batch carries the step's totals
            (rows, tokens, longest completion: losses.BatchTotals) and the loss divides by them
            itself, so the micro-batch losses add up to exactly the full-batch loss whatever its
            normalisation (seq, token, dr, per-row): the trainer only sums
  step      gradient accumulation, global-norm clipping, AdamW
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from losses.base import BatchTotals, LossInputs
from node.round.config import TrainConfig
from node.round.groups import Group
from node.round.scoring import TokenRow, score_rows


@dataclass
class Row:
    tokens: TokenRow
    logp_beh: list[float]  # per-token μ, only meaningful when aligned
    logp_beh_seq: float  # Σ_t log μ_t in the sender's tokenization
    aligned: bool
    advantage: float
    group_id: int
    external: bool


@dataclass
class StepResult:
    metrics: dict[str, float]
    rows: int
    rows_filtered: int
    tokens: int
    seconds: float
    stepped: bool


def build_rows(groups: list[Group], tokenizer, prompt_of) -> list[Row]:
    """Flatten groups into rows in our tokenization. `prompt_of(task) -> str` renders our prompt."""
    rows = []
    for gid, g in enumerate(groups):
        prompt_ids = tokenizer(prompt_of(g.task), add_special_tokens=False)["input_ids"]
        for c, adv in zip(g.completions, g.advantages):
            if g.aligned:
                ids, beh = list(c.token_ids), list(c.logprobs)
            else:
                ids = tokenizer(c.text, add_special_tokens=False)["input_ids"]
                if c.finish_reason == "stop":
                    ids.append(tokenizer.eos_token_id)
                beh = [0.0] * len(ids)
            if not ids:  # an empty re-tokenisation has nothing to train
                continue
            rows.append(
                Row(TokenRow(prompt_ids, ids), beh, sum(c.logprobs), g.aligned, adv, gid, g.is_external)
            )
    return rows


def dash_filter(rows: list[Row], threshold: float) -> list[Row]:
    """DASH gradient filtering: |A| < threshold contributes ~nothing; keep at least one row."""
    if threshold <= 0 or not rows:
        return rows
    kept = [r for r in rows if abs(r.advantage) >= threshold]
    return kept or [max(rows, key=lambda r: abs(r.advantage))]


def micro_batches(rows: list[Row], size: int) -> list[list[Row]]:
    """Whole groups per micro-batch, up to `size` rows (a group larger than `size` stays whole).

    Bucketed by length: groups are taken in order of their longest row (prompt + completion), and
    a micro-batch closes when the next group's longest row is more than twice the first one's,
    so every row is padded to less than twice its bucket's shortest longest-row and one long
    group pads only itself (a forward pass costs rows × the longest row in it). The loss divides
    by the step's totals, so how rows are split into micro-batches does not change the step.
    """
    by_group: dict[int, list[Row]] = {}
    for r in rows:
        by_group.setdefault(r.group_id, []).append(r)
    ordered = sorted(by_group.values(), key=lambda g: max(_row_len(r) for r in g))  # stable
    batches: list[list[Row]] = []
    current: list[Row] = []
    floor = 0  # longest row of the current micro-batch's first group
    for group in ordered:
        longest = max(_row_len(r) for r in group)
        if current and (len(current) + len(group) > size or longest > 2 * floor):
            batches.append(current)
            current = []
        if not current:
            floor = longest
        current.extend(group)
    if current:
        batches.append(current)
    return batches


def _row_len(r: Row) -> int:
    return len(r.tokens.prompt_ids) + len(r.tokens.completion_ids)


def batch_totals(rows: list[Row]) -> BatchTotals:
    lengths = [len(r.tokens.completion_ids) for r in rows]
    return BatchTotals(rows=len(rows), tokens=sum(lengths), max_len=max(lengths))


def loss_inputs(model, rows: list[Row], temperature: float, pad_id: int, totals: BatchTotals | None = None) -> LossInputs:
    logp, mask = score_rows(model, [r.tokens for r in rows], temperature, pad_id)  # [b, T]
    beh = torch.zeros_like(mask)
    for i, r in enumerate(rows):
        if r.aligned:
            beh[i, : len(r.logp_beh)] = torch.tensor(r.logp_beh)
    return LossInputs(
        logp=logp,
        logp_old=logp.detach(),
        logp_beh=beh,
        logp_beh_seq=torch.tensor([r.logp_beh_seq for r in rows]),
        beh_aligned=torch.tensor([r.aligned for r in rows]),
        mask=mask,
        advantages=torch.tensor([r.advantage for r in rows]),
        group_ids=torch.tensor([r.group_id for r in rows]),
        is_external=torch.tensor([r.external for r in rows]),
        totals=totals,
    )


def train_step(model, optimizer, rows: list[Row], loss_fn, cfg: TrainConfig, *, temperature: float,
               pad_id: int, regularizer=None) -> StepResult:
    """One optimizer step; `regularizer() -> scalar` (e.g. FedProx) is added to the loss once per step."""
    start = time.perf_counter()
    total = len(rows)
    rows = dash_filter(rows, cfg.dash_threshold)
    if not rows:
        return StepResult({}, 0, 0, 0, time.perf_counter() - start, False)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    sums: dict[str, float] = {}
    maxes: dict[str, float] = {}
    totals = batch_totals(rows)
    for mb in micro_batches(rows, cfg.micro_batch_rows):
        out = loss_fn(loss_inputs(model, mb, temperature, pad_id, totals))  # already this batch's share
        out.loss.backward()
        share = len(mb) / len(rows)  # metrics are per-batch means: weight them by rows
        for k, v in out.metrics.items():
            if k.endswith("_max"):
                maxes[k] = max(maxes.get(k, float("-inf")), v)
            elif k == "tokens":
                continue
            else:
                sums[k] = sums.get(k, 0.0) + v * share
        sums["loss"] = sums.get("loss", 0.0) + float(out.loss.detach())
    if regularizer is not None:
        reg = regularizer()
        reg.backward()
        sums["prox_loss"] = float(reg.detach())
    params = [p for p in model.parameters() if p.requires_grad]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    metrics = {**sums, **maxes, "grad_norm": float(grad_norm), "tokens": float(totals.tokens)}
    return StepResult(metrics, len(rows), total - len(rows), totals.tokens, time.perf_counter() - start, True)


def build_optimizer(model, cfg: TrainConfig) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=cfg.betas)
