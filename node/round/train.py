"""The optimizer steps of one round on the selected groups (docs/ARCHITECTURE.md §2, steps 7–8).

  rows      every completion of every selected group, in *this node's* tokenization: a peer's
            token ids and per-token μ when its tokenizer fingerprint equals ours, else the
            completion text re-tokenised and μ kept summed per chunk of text both tokenizations
            end at (node/round/align.py), or over the whole completion (docs/ARCHITECTURE.md §6)
  DASH      rows with |A_i| < threshold are dropped before any forward pass (at least one kept)
  π_old     the policy at the start of the round's steps, fixed for all of them (PPO): with one
            step it is sg(π_θ) of the step's own forward; with `epochs` × `mini_batches` > 1 steps
            a no-grad forward scores every row once before the first step
  π_ref     (a loss that asks for it, e.g. grpo with beta > 0) a no-grad forward of the reference
            policy: the LoRA base with the adapter disabled, or a frozen copy of the initial weights
  steps     `epochs` passes over the rows, each split into `mini_batches` mini-batches of whole
            groups (one optimizer step each): DASH's Multi (epochs = K) and Mini (mini_batches = K)
  loss      `losses.build_loss_from_config(cfg)`; every micro-batch carries its mini-batch's totals
            (rows, tokens, longest completion: losses.base.BatchTotals) and the loss divides by them
            itself, so the micro-batch losses add up to exactly the mini-batch loss whatever its
            normalisation (seq, token, dr, per-row): the trainer only sums
  teacher   a row may carry a teacher's log π_T of each of its tokens (`Row.logp_teacher`, on-policy
            distillation); loss_inputs passes them on, and a loss wrapped by losses.distill uses them
  step      gradient accumulation over micro-batches, global-norm clipping, AdamW
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from losses.base import BatchTotals, LossInputs
from node.round.align import chunk_alignment, receiver_ids_and_ends
from node.round.config import TrainConfig
from node.round.groups import Group
from node.round.logprobs import TokenRow, score_rows
from node.round.record import Over, StepMetrics, over_of, step_metrics


@dataclass
class Row:
    tokens: TokenRow
    logp_beh: list[float]  # per-token μ, only meaningful when aligned
    logp_beh_seq: float  # Σ_t log μ_t in the sender's tokenization
    aligned: bool
    advantage: float
    group_id: int
    external: bool
    truncated: bool = False  # the completion hit max_new_tokens (no EOS sampled)
    chunks: list[int] | None = None  # unaligned rows: chunk index of each of our tokens (node/round/align.py)
    chunk_logp: list[float] | None = None  # unaligned rows: the sender's log μ of each chunk
    imitable: bool = True  # train.imitate may push it up if its advantage is positive (build_rows' imitate_bar)
    logp_teacher: list[float | None] | None = None  # a teacher's log π_T of each of our tokens (node.distill.score); None: none (an entry None: that token unscored)
    teacher_chunks: list[int] | None = None  # our tokens per chunk the teacher aligned (None: one token per chunk)
    teacher_kind: list[int] | None = None  # per token: text 0, final EOS 1, off-split 2 (losses/distill.py); None: text


@dataclass
class StepResult:
    metrics: StepMetrics  # per-step means (maxima where declared) over the round's steps (node.round.record)
    rows: int  # rows trained on
    rows_filtered: int  # rows dropped before scoring (DASH, truncated)
    tokens: int
    seconds: float
    steps: int  # optimizer steps taken (epochs × mini_batches, 0 when there was nothing to train)

    @property
    def stepped(self) -> bool:
        return self.steps > 0

    @classmethod
    def empty(cls) -> StepResult:
        """No step taken and nothing trained (a round that does not train)."""
        return cls(StepMetrics(), 0, 0, 0, 0.0, 0)


def build_rows(groups: list[Group], tokenizer, prompt_of, *, chunks: bool = True,
               imitate_bar: float | None = None) -> list[Row]:
    """Flatten groups into rows in our tokenization. `prompt_of(task) -> str` renders our prompt.

    With `imitate_bar`, only rows whose reward exceeds it are `imitable` (train.imitate_bar: own).

    A completion from another tokenizer is re-tokenised; with `chunks` and the sender's
    token_bytes, the sender's logprobs are summed per chunk of text both tokenizations end at.
    """
    rows = []
    for gid, g in enumerate(groups):
        prompt_ids = tokenizer(prompt_of(g.task), add_special_tokens=False)["input_ids"]
        own = g.aligned and not g.is_external and g.teacher_logps
        teacher = g.teacher_logps if own else [None] * len(g.completions)
        teacher_chunks = (g.teacher_chunks or [None] * len(g.completions)) if own else [None] * len(g.completions)
        teacher_kinds = (g.teacher_kinds or [None] * len(g.completions)) if own else [None] * len(g.completions)
        for c, adv, reward, logp_teacher, t_chunks, t_kind in zip(g.completions, g.advantages, g.rewards, teacher,
                                                                  teacher_chunks, teacher_kinds):
            alignment = None
            if g.aligned:
                ids, beh = list(c.token_ids), list(c.logprobs)
            else:
                ids, ends = receiver_ids_and_ends(tokenizer, c.text)
                if c.finish_reason == "stop":
                    ids.append(tokenizer.eos_token_id)
                    ends = None if ends is None else [*ends, ends[-1] if ends else 0]
                beh = [0.0] * len(ids)
                if chunks and ends and c.token_bytes is not None:
                    alignment = chunk_alignment(ends, c.token_bytes, c.logprobs)
            if not ids:  # an empty re-tokenisation has nothing to train
                continue
            rows.append(Row(TokenRow(prompt_ids, ids), beh, sum(c.logprobs), g.aligned, adv, gid, g.is_external,
                            truncated=c.finish_reason == "length",
                            chunks=alignment[0] if alignment else None, chunk_logp=alignment[1] if alignment else None,
                            imitable=imitate_bar is None or reward > imitate_bar, logp_teacher=logp_teacher,
                            teacher_chunks=t_chunks, teacher_kind=t_kind))
    return rows


def dash_filter(rows: list[Row], threshold: float) -> list[Row]:
    """DASH gradient filtering: |A| < threshold contributes ~nothing (unless a teacher scored the row); keep at
    least one row."""
    if threshold <= 0 or not rows:
        return rows
    kept = [r for r in rows if abs(r.advantage) >= threshold or r.logp_teacher is not None]  # a teacher's signal
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


def mini_batches(rows: list[Row], k: int) -> list[list[Row]]:
    """`rows` in k mini-batches of whole groups, in order, as even in rows as whole groups allow."""
    groups = [[r for r in rows if r.group_id == gid] for gid in dict.fromkeys(r.group_id for r in rows)]
    k = max(1, min(k, len(groups)))
    target = len(rows) / k
    out: list[list[Row]] = [[]]
    done = 0
    for g in groups:
        if out[-1] and len(out) < k and done + len(g) / 2 > target * len(out):
            out.append([])
        out[-1].extend(g)
        done += len(g)
    return out


def batch_totals(rows: list[Row]) -> BatchTotals:
    lengths = [len(r.tokens.completion_ids) for r in rows]
    return BatchTotals(rows=len(rows), tokens=sum(lengths), max_len=max(lengths))


@torch.no_grad()
def frozen_scores(score, rows: list[Row], micro_batch_rows: int, temperature: float, pad_id: int) -> dict[int, torch.Tensor]:
    """id(row) → log-probs [|y|] of its completion under `score` (a model, or a callable that scores
    TokenRows), no gradient: π_old before the first step, or the reference policy."""
    out = {}
    for mb in micro_batches(rows, micro_batch_rows):
        logp, _ = score([r.tokens for r in mb], temperature, pad_id) if not isinstance(score, torch.nn.Module) \
            else score_rows(score, [r.tokens for r in mb], temperature, pad_id)
        for i, r in enumerate(mb):
            out[id(r)] = logp[i, : len(r.tokens.completion_ids)].detach()
    return out


def _padded(rows: list[Row], scores: dict[int, torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(like)
    for i, r in enumerate(rows):
        out[i, : len(r.tokens.completion_ids)] = scores[id(r)].to(out.dtype)
    return out


def loss_inputs(model, rows: list[Row], temperature: float, pad_id: int, totals: BatchTotals | None = None,
                old: dict[int, torch.Tensor] | None = None, ref: dict[int, torch.Tensor] | None = None,
                chunk_spread: bool = False) -> LossInputs:
    """One micro-batch's LossInputs: log π_θ with gradient, π_old (fixed, or this forward's), μ, π_ref."""
    logp, mask = score_rows(model, [r.tokens for r in rows], temperature, pad_id)  # [b, T]
    beh = torch.zeros_like(mask)
    chunk_ids = torch.full(mask.shape, -1, dtype=torch.long)
    chunk_logp = torch.zeros_like(mask)
    for i, r in enumerate(rows):
        if r.aligned:
            beh[i, : len(r.logp_beh)] = torch.tensor(r.logp_beh)
        elif r.chunks is not None:
            chunk_ids[i, : len(r.chunks)] = torch.tensor(r.chunks)
            chunk_logp[i, : len(r.chunk_logp)] = torch.tensor(r.chunk_logp)
    teacher, scored, teacher_chunk, teacher_kind = _teacher_scores(rows, mask)
    dev = logp.device  # the model's (train.device)
    return LossInputs(
        logp=logp,
        logp_old=logp.detach() if old is None else _padded(rows, old, mask),
        logp_beh=beh,
        logp_beh_seq=torch.tensor([r.logp_beh_seq for r in rows], device=dev),
        beh_aligned=torch.tensor([r.aligned for r in rows], device=dev),
        mask=mask,
        advantages=torch.tensor([r.advantage for r in rows], device=dev),
        group_ids=torch.tensor([r.group_id for r in rows], device=dev),
        is_external=torch.tensor([r.external for r in rows], device=dev),
        logp_ref=None if ref is None else _padded(rows, ref, mask),
        totals=totals,
        beh_chunks=chunk_ids.to(dev) if any(r.chunks is not None for r in rows) else None,
        logp_beh_chunks=chunk_logp.to(dev),
        chunk_spread=chunk_spread,
        imitable=torch.tensor([r.imitable for r in rows], device=dev),
        logp_teacher=None if teacher is None else teacher.to(dev),
        teacher_scored=None if scored is None else scored.to(dev),
        teacher_chunk=None if teacher_chunk is None else teacher_chunk.to(dev),
        teacher_kind=None if teacher_kind is None else teacher_kind.to(dev),
    )


def _teacher_scores(rows: list[Row], mask: torch.Tensor):
    """A teacher's log π_T [b, T], the tokens it scored [b, T] (a row's scores of another length: none), the
    chunk of each token [b, T] (its own index for one token per chunk) and each token's kind [b, T] (None when no row
    has kinds), or Nones when no row has any (losses/distill.py reads them)."""
    if all(r.logp_teacher is None for r in rows):
        return None, None, None, None
    teacher = torch.zeros(mask.shape)
    scored = torch.zeros(mask.shape, dtype=torch.bool)
    chunk = torch.arange(mask.shape[1]).expand(mask.shape).clone()
    kind = torch.zeros(mask.shape, dtype=torch.long) if any(r.teacher_kind is not None for r in rows) else None
    for i, r in enumerate(rows):
        n = len(r.tokens.completion_ids)
        if r.logp_teacher is not None and len(r.logp_teacher) == n:  # None: a token the teacher did not score
            teacher[i, :n] = torch.tensor([0.0 if v is None else v for v in r.logp_teacher])
            scored[i, :n] = torch.tensor([v is not None for v in r.logp_teacher])
            if r.teacher_chunks is not None and sum(r.teacher_chunks) == n:
                chunk[i, :n] = torch.repeat_interleave(torch.arange(len(r.teacher_chunks)),
                                                       torch.tensor(r.teacher_chunks))
            if kind is not None and r.teacher_kind is not None and len(r.teacher_kind) == n:
                kind[i, :n] = torch.tensor(r.teacher_kind, dtype=torch.long)
    return teacher, scored, chunk, kind


def train_step(model, optimizer, rows: list[Row], loss_fn, cfg: TrainConfig, *, temperature: float,
               pad_id: int, regularizer=None, reference=None) -> StepResult:
    """The round's optimizer steps: `cfg.epochs` × `cfg.mini_batches` (one by default).

    `regularizer() -> scalar` (e.g. FedProx) is added to every step's loss; `reference` (a model
    or a TokenRow scorer) gives π_ref for a loss that needs it (`loss_fn.needs_reference`).
    """
    if cfg.micro_batch_rows == "auto":
        raise ValueError("train.micro_batch_rows auto is resolved once at start (node.round.sizing.plan_memory), "
                         "before any step")
    start = time.perf_counter()
    total = len(rows)
    rows = dash_filter(rows, cfg.dash_threshold)
    if cfg.mask_truncated:
        rows = [r for r in rows if not r.truncated]
    if not rows:
        return StepResult(StepMetrics(), 0, total, 0, time.perf_counter() - start, 0)
    model.train()
    steps = cfg.epochs * min(cfg.mini_batches, len({r.group_id for r in rows}))
    old = frozen_scores(model, rows, cfg.micro_batch_rows, temperature, pad_id) if steps > 1 else None
    ref = None
    if getattr(loss_fn, "needs_reference", False):
        if reference is None:
            raise ValueError("the loss needs reference log-probs (e.g. grpo beta > 0) but the node built no reference")
        ref = frozen_scores(reference, rows, cfg.micro_batch_rows, temperature, pad_id)
    log = _StepLog()
    for _ in range(cfg.epochs):
        for batch in mini_batches(rows, cfg.mini_batches):
            _one_step(model, optimizer, batch, loss_fn, cfg, temperature, pad_id, old, ref, regularizer, log)
    device = next(model.parameters()).device
    if device.type == "cuda":  # the optimizer step's kernels are still running: step_s counts them
        torch.cuda.synchronize(device)
    return StepResult(log.metrics(), len(rows), total - len(rows), sum(len(r.tokens.completion_ids) for r in rows),
                      time.perf_counter() - start, log.steps)


class _StepLog:
    """Per-step metrics, averaged over the round's steps (maxima for those declared Over.MAX)."""

    def __init__(self):
        self.steps, self.sums, self.maxes = 0, {}, {}

    def add(self, metrics: dict[str, float], combine: dict[str, str]) -> None:
        self.steps += 1
        for k, v in metrics.items():
            if over_of(k, combine) is Over.MAX:
                self.maxes[k] = max(self.maxes.get(k, float("-inf")), v)
            else:
                self.sums[k] = self.sums.get(k, 0.0) + v

    def metrics(self) -> StepMetrics:
        return step_metrics({**{k: v / self.steps for k, v in self.sums.items()}, **self.maxes,
                             "steps": float(self.steps)})


def _one_step(model, optimizer, rows: list[Row], loss_fn, cfg: TrainConfig, temperature: float, pad_id: int,
              old, ref, regularizer, log: _StepLog) -> None:
    optimizer.zero_grad(set_to_none=True)
    step: dict[str, float] = {"loss": 0.0}
    maxes: dict[str, float] = {}
    combine: dict[str, str] = {}
    totals = batch_totals(rows)
    n_ext = sum(r.external for r in rows)
    for mb in micro_batches(rows, cfg.micro_batch_rows):
        out = loss_fn(loss_inputs(model, mb, temperature, pad_id, totals, old, ref,  # already this batch's share
                                  chunk_spread=cfg.cross_tokenizer == "chunks-geometric"))
        out.loss.backward()
        combine.update(out.combine)
        # metrics are per-batch means: weight them by rows, and those over peers' (own) rows by peers' (own) rows
        mb_ext = sum(r.external for r in mb)
        shares = {Over.ROWS: len(mb) / len(rows), Over.PEER_ROWS: mb_ext / n_ext if n_ext else 0.0,
                  Over.OWN_ROWS: (len(mb) - mb_ext) / (len(rows) - n_ext) if len(rows) > n_ext else 0.0}
        for k, v in out.metrics.items():  # how each combines is declared on its field (node.round.record)
            over = over_of(k, out.combine)
            if over is Over.MAX:
                maxes[k] = max(maxes.get(k, float("-inf")), v)
            elif over is Over.SUM:
                step[k] = step.get(k, 0.0) + v
            elif over is not Over.STEP:
                step[k] = step.get(k, 0.0) + v * shares[over]
        step["loss"] += float(out.loss.detach())
    if regularizer is not None:
        reg = regularizer()
        reg.backward()
        step["prox_loss"] = float(reg.detach())
    params = [p for p in model.parameters() if p.requires_grad]
    step["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    step["tokens"] = float(totals.tokens)
    log.add({**step, **maxes}, combine)


def build_optimizer(model, cfg: TrainConfig) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=cfg.betas)
