"""`lab-*` built-ins: small models warm-started offline to a low-but-clear accuracy (docs/ARCHITECTURE.md §9).

Why: on a CPU a pretrained 135M model scores 0 with strict scoring on easy reasoning-gym tasks,
so RL has no signal. A lab model is a ~3M-parameter Llama trained from scratch by supervised
fine-tuning (SFT) on one reasoning-gym task, then stopped *early*: it already answers in the
strict format `<answer>…</answer>` and is right sometimes, so GRPO groups have non-zero reward
variance (signal) and plenty of wrong answers to fix (headroom); completions are a few tokens,
so a round takes seconds.

SFT data are rendered exactly as a node prompts them: `render_prompt(tok, question, None)`
(node.tasks; no system prompt) followed by the target `<answer>{answer}</answer><|end|>`. The
loss is the mean token cross-entropy over target tokens only (prompt tokens are masked):
    L(θ) = −(1/|T|) Σ_{t∈T} log π_θ(y_t | x, y_<t).
The tokenizer is a byte-level BPE with every digit its own pre-token (numbers tokenise digit by
digit), trained on the task's own text.

Stopping rule (deliberate early stop):
  - every `eval_every` steps, sample one completion per item of a *stopping set* (128 items,
    dataset seed `seed + 1`) at temperature 1.0, top_k = 0, top_p = 1 (the RL setting), score
    strictly with the dataset's verifier, and stop at the first evaluation whose mean reward is
    ≥ `stop_at` (15 %); reaching `max_steps` first is a build error.
  - the accuracy reported in `lab.json` is then measured on a separate *report set* (512 items,
    seed `seed + 2`), sampled (T = 1) and greedy, so the number is not biased by the stopping
    decision (128 items were too few: sampled accuracy 0.098 or 0.191 by sampling seed alone). Target band for the
    sampled accuracy: 10 %–45 % (a stop at 35 % on 128 items has a standard error of ≈ 0.04, so the report set
    may read a few points above it: lab-spell reads 0.377 or 0.412 depending on the installed packages).
Training items come from dataset seed `seed`. These easy configurations have small question
spaces, so the three streams overlap in questions: "held out" means other draws, not unseen
questions; a node's own task stream (any seed) is the same distribution.

Determinism: one seed fixes the corpus, tokenizer, init, batches and evaluation sampling;
the build is bit-for-bit repeatable on a given machine with the same `threads` (CPU matmul
reduction order depends on the thread count).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from node.books.progress import Progress as StepProgress
from node.models.builders import (
    init_causal_lm,
    save_model_dir,
    task_corpus,
    tiny_config,
    train_bpe,
)

Progress = Callable[[str], None]


@dataclass(frozen=True)
class LabRecipe:
    """Everything that determines a lab model; stored in its `lab.json`."""

    dataset: str  # reasoning-gym dataset the model is warm-started on
    config: dict = field(default_factory=dict)  # its config: example node configs must match it
    seed: int = 0  # training data seed; stopping set = seed + 1, report set = seed + 2
    vocab_size: int = 320  # BPE vocabulary (256 bytes + 5 specials + merges)
    hidden: int = 256  # model width; head_dim = hidden / heads = 64
    layers: int = 4
    heads: int = 4
    intermediate: int = 512  # MLP width
    batch_size: int = 64  # SFT sequences per step
    lr: float = 1e-3  # AdamW peak learning rate (linear warmup, then constant)
    warmup_steps: int = 20
    max_steps: int = 1500  # hard cap; not reaching `stop_at` by then fails the build
    eval_every: int = 25  # steps between stopping-set evaluations
    stop_at: float = 0.15  # stop at the first sampled stopping-set value of `stop_metric` ≥ this
    stop_metric: str = "reward"  # "reward": mean strict reward (partial credit counts); "accuracy": fraction fully correct
    stop_items: int = 128  # stopping-set size
    report_items: int = 512  # report-set size: at 128 the sampled accuracy swung 0.10–0.19 with the sampling seed
    max_new_tokens: int = 16  # generation cap at evaluation
    threads: int = 2  # torch CPU threads during the build


TARGET_SAMPLED_ACCURACY = (0.10, 0.45)  # the report set's sampled exact match a build must land in

LAB_RECIPES: dict[str, LabRecipe] = {
    # "a ± b =" with a, b of 1–2 digits (answers −99…198)
    "lab-chain-sum": LabRecipe(
        "chain_sum", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}
    ),
    # "Spell this word backward (example: sun -> nus): {word}", words of 3–6 letters (34,428 words).
    # The verifier gives per-position partial credit, so most GRPO groups have reward variance; the
    # answer is ~5 sampled characters, so at T = 1 sampled exact-match accuracy (≈ 0.35–0.38) is far
    # below greedy (≈ 0.60–0.66): RL has clear headroom (docs/benchmarks/learning.md).
    # vocab 300 = 256 bytes + 5 specials + 39 merges: the fixed instruction merges into whole words
    # while the words themselves stay (mostly) one character per token.
    "lab-spell": LabRecipe(
        "spell_backward", {"min_word_len": 3, "max_word_len": 6},
        vocab_size=300, hidden=128, layers=4, heads=2, intermediate=256,
        stop_at=0.35, stop_metric="accuracy", threads=1,
    ),
    # The same task with another tokenizer, for heterogeneous pairs (docs/benchmarks/learning.md §12): vocab
    # 420 = 256 bytes + 5 specials + 159 merges, so common letter pairs are single tokens
    # ("<answer>tenalp</answer>" is 10 tokens, t·en·al·p, against lab-spell's 12); another seed, the
    # same size and stopping rule. Reaches the stop after ≈ 625 SFT steps (lab-spell: 250).
    "lab-spell-wide": LabRecipe(
        "spell_backward", {"min_word_len": 3, "max_word_len": 6}, seed=1,
        vocab_size=420, hidden=128, layers=4, heads=2, intermediate=256,
        stop_at=0.35, stop_metric="accuracy", threads=1,
    ),
}


@dataclass
class EvalResult:
    accuracy: float  # fraction of completions fully correct (strict reward ≥ 1), as node evaluation counts
    reward: float  # mean strict reward (partial credit included where the verifier gives it)
    mean_tokens: float  # mean completion length in tokens (eos included)
    samples: list[str]  # a few completions, for the build log


def _tasks(recipe: LabRecipe, seed: int, n: int, offset: int = 0):
    from node.tasks.source import regenerate
    from protocols.records import TaskRef

    return [regenerate(TaskRef(recipe.dataset, dict(recipe.config), seed, offset + i)) for i in range(n)]


def _sft_batch(tok, tasks) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded input ids [B, L], attention mask [B, L] and labels [B, L] (-100 on prompts)."""
    from node.tasks.source import render_prompt

    rows, targets = [], []
    for task in tasks:
        prompt = tok.encode(render_prompt(tok, task.question, None), add_special_tokens=False)
        target = tok.encode(f"<answer>{task.answer}</answer>", add_special_tokens=False)
        rows.append(prompt + target + [tok.eos_token_id])
        targets.append(len(target) + 1)
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tok.pad_token_id)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100)
    for i, (row, n_target) in enumerate(zip(rows, targets)):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
        labels[i, len(row) - n_target : len(row)] = torch.tensor(row[-n_target:])
    return ids, mask, labels


@torch.no_grad()
def evaluate(model, tok, tasks, *, greedy: bool, seed: int, max_new_tokens: int) -> EvalResult:
    """One completion per task, T = 1 sampling (top_k = 0, top_p = 1) or greedy; strict reward."""
    from transformers import GenerationConfig

    from node.tasks.source import render_prompt, score

    prompts = [render_prompt(tok, t.question, None) for t in tasks]
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    gen_cfg = GenerationConfig(
        do_sample=not greedy,
        temperature=1.0 if not greedy else None,
        top_k=0 if not greedy else None,
        top_p=1.0 if not greedy else None,
        max_new_tokens=max_new_tokens,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    was_training = model.training
    model.eval()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        out = model.generate(**enc, generation_config=gen_cfg)
    model.train(was_training)
    new = out[:, enc["input_ids"].shape[1] :]  # [N, L]
    texts, lengths = [], []
    for row in new.tolist():
        end = row.index(tok.eos_token_id) + 1 if tok.eos_token_id in row else len(row)
        lengths.append(end)
        texts.append(tok.decode(row[:end], skip_special_tokens=True))
    rewards = [score(t, text) for t, text in zip(tasks, texts)]
    correct = [r >= 1.0 for r in rewards]
    return EvalResult(sum(correct) / len(correct), sum(rewards) / len(rewards), sum(lengths) / len(lengths), texts[:4])


def _lr_at(step: int, recipe: LabRecipe) -> float:
    return recipe.lr * min(1.0, (step + 1) / recipe.warmup_steps)


def train_lab_model(recipe: LabRecipe, progress: Progress = print):
    """Build tokenizer + model and run SFT until the stopping rule fires; returns (model, tok, log)."""
    corpus = task_corpus([(recipe.dataset, recipe.config)], n_per_dataset=2000, seed=recipe.seed)
    tok = train_bpe(corpus, recipe.vocab_size, pre="digits")
    cfg = tiny_config(
        "llama", tok, hidden_size=recipe.hidden, intermediate_size=recipe.intermediate,
        num_hidden_layers=recipe.layers, num_attention_heads=recipe.heads,
        num_key_value_heads=recipe.heads, tie_word_embeddings=True, max_position_embeddings=512,
    )  # fmt: skip
    model = init_causal_lm(cfg, seed=recipe.seed)
    n_params = sum(p.numel() for p in model.parameters())
    progress(f"{recipe.dataset}: {n_params:,} parameters, vocab {len(tok)}")
    stop_set = _tasks(recipe, recipe.seed + 1, recipe.stop_items)
    opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=0.0)
    model.train()
    curve = []
    with StepProgress(f"SFT of the lab model on {recipe.dataset}", total=recipe.max_steps,
                      unit="steps (at most)", upper_bound=True, every_s=15) as bar:
        return _sft(recipe, model, tok, opt, stop_set, curve, progress, bar)


def _sft(recipe: LabRecipe, model, tok, opt, stop_set, curve: list, progress: Progress, bar: StepProgress):
    for step in range(recipe.max_steps):
        batch = _tasks(recipe, recipe.seed, recipe.batch_size, offset=step * recipe.batch_size)
        ids, mask, labels = _sft_batch(tok, batch)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, recipe)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if not math.isfinite(loss.item()):
            raise RuntimeError(f"lab model SFT diverged at step {step}: loss {loss.item()}")
        bar.update(step + 1, f"loss {loss.item():.3f}")
        if (step + 1) % recipe.eval_every == 0:
            ev = evaluate(
                model,
                tok,
                stop_set,
                greedy=False,
                seed=recipe.seed + step,
                max_new_tokens=recipe.max_new_tokens,
            )
            curve.append({"step": step + 1, "loss": round(loss.item(), 4), "sampled_accuracy": ev.accuracy,
                          "sampled_reward": round(ev.reward, 4)})
            progress(
                f"step {step + 1:5d}  loss {loss.item():.3f}  sampled acc {ev.accuracy:.3f}  reward {ev.reward:.3f}  "
                f"e.g. {ev.samples[0]!r}"
            )
            if (ev.accuracy if recipe.stop_metric == "accuracy" else ev.reward) >= recipe.stop_at:
                model.eval()
                return model, tok, curve
    raise RuntimeError(
        f"lab model did not reach {recipe.stop_at:.0%} sampled {recipe.stop_metric} in {recipe.max_steps} steps"
    )


def build_lab(alias: str, out_dir: Path, progress: Progress = print) -> dict:
    """Train `LAB_RECIPES[alias]`, measure it on the report set, save model + `lab.json`."""
    recipe = LAB_RECIPES[alias]
    t0 = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(recipe.threads)
    try:
        model, tok, curve = train_lab_model(recipe, progress)
        report = _tasks(recipe, recipe.seed + 2, recipe.report_items)
        kw = {"seed": recipe.seed + 2, "max_new_tokens": recipe.max_new_tokens}
        sampled = evaluate(model, tok, report, greedy=False, **kw)
        greedy = evaluate(model, tok, report, greedy=True, **kw)
    finally:
        torch.set_num_threads(threads)
    lab = {
        "alias": alias,
        "dataset": recipe.dataset,
        "config": recipe.config,
        "system_prompt": None,
        "extraction": "strict",
        "recipe": asdict(recipe),
        "target_sampled_accuracy": list(TARGET_SAMPLED_ACCURACY),
        "sampled_accuracy": sampled.accuracy,
        "greedy_accuracy": greedy.accuracy,
        "sampled_reward": sampled.reward,
        "greedy_reward": greedy.reward,
        "mean_completion_tokens": sampled.mean_tokens,
        "steps": curve[-1]["step"],
        "curve": curve,
        "build_seconds": round(time.perf_counter() - t0, 1),
    }
    progress(
        f"{alias}: report set sampled acc {sampled.accuracy:.3f}, greedy acc {greedy.accuracy:.3f}, "
        f"{sampled.mean_tokens:.1f} tokens/completion, {lab['build_seconds']} s"
    )
    probe = [t.question for t in report[:20]]
    save_model_dir(model, tok, out_dir, {"arch": "llama", "lab": alias}, probe)
    (out_dir / "lab.json").write_text(json.dumps(lab, indent=2) + "\n")
    return lab


def build_lab_chain_sum(out_dir: Path, progress: Progress = print) -> None:
    build_lab("lab-chain-sum", out_dir, progress)


def build_lab_spell(out_dir: Path, progress: Progress = print) -> None:
    build_lab("lab-spell", out_dir, progress)


def build_lab_spell_wide(out_dir: Path, progress: Progress = print) -> None:
    build_lab("lab-spell-wide", out_dir, progress)
