"""On-policy distillation's estimator (losses/distill.py) and the train step that carries a teacher's scores.

The learning check: a student trained only by the distillation term on its own samples, scored by a
fixed teacher (a perturbed copy of itself), moves towards the teacher — the exact reverse KL
KL(π_student ‖ π_teacher) per token, on a fixed set of the student's initial samples, falls — and with
λ = 0 it does not move. tests/slow/test_distill_learning.py runs the same on the lab model.
"""

from __future__ import annotations

import copy

import pytest
import torch

from losses.base import LossInputs
from losses.distill import (
    UNBOUNDED,
    distill_advantages,
    distill_term,
    linear_lambda,
    with_distillation,
)
from losses.registry import build_loss
from node.distill.score import score_for_requester
from node.generation.config import GenerationConfig
from node.generation.hf import HFGenerator
from node.models.config import ModelConfig
from node.models.load import load_model
from node.round.config import TrainConfig
from node.round.logprobs import TokenRow
from node.round.train import Row, build_optimizer, loss_inputs, train_step

WORDS = ["planet", "cat", "house", "river", "stone", "bird"]


def _inputs(logp, old, teacher, scored, adv, external=None) -> LossInputs:
    B, T = len(logp), len(logp[0])
    lp = torch.tensor(logp, requires_grad=True)
    return LossInputs(
        logp=lp, logp_old=torch.tensor(old), logp_beh=torch.tensor(old), logp_beh_seq=torch.zeros(B),
        beh_aligned=torch.ones(B, dtype=torch.bool), mask=torch.ones(B, T), advantages=torch.tensor(adv),
        group_ids=torch.zeros(B, dtype=torch.long),
        is_external=torch.tensor(external or [False] * B),
        logp_teacher=torch.tensor(teacher), teacher_scored=torch.tensor(scored))


def test_the_advantage_adds_the_reverse_kl_on_scored_own_tokens_only():
    inputs = _inputs(logp=[[-1.0, -2.0], [-1.0, -1.0]], old=[[-1.0, -2.0], [-1.0, -1.0]],
                     teacher=[[-3.0, -0.5], [-9.0, -9.0]], scored=[[True, False], [True, True]],
                     adv=[0.5, -0.25], external=[False, True])
    adv = distill_advantages(inputs, lam=2.0, bounds=UNBOUNDED)  # the estimator itself (the bounds: test_distill_bounds)
    # own row: token 0 scored (−1 − (−3) = 2 → 0.5 − 4), token 1 unscored; the peer's row: the reward alone
    assert adv.tolist() == [[0.5 - 4.0, 0.5], [-0.25, -0.25]]
    assert distill_advantages(inputs, lam=0.0).tolist() == [[0.5, 0.5], [-0.25, -0.25]]


def test_the_term_is_the_policy_gradient_of_the_per_token_advantage():
    inputs = _inputs(logp=[[-1.0, -2.0, -0.5]], old=[[-1.0, -2.0, -0.5]], teacher=[[-3.0, -0.5, -0.5]],
                     scored=[[True, True, False]], adv=[0.0])
    term, metrics = distill_term(inputs, lam=0.5)
    term.backward()
    # first step (R = 1): ∂/∂log π_θ(t) = λ·d_t / |y| with d = log π_old − log π_T = (2, −1.5, unscored)
    assert inputs.logp.grad[0].tolist() == pytest.approx([0.5 * 2.0 / 3, 0.5 * -1.5 / 3, 0.0])
    assert metrics["distill_kl"] == pytest.approx(0.25) and metrics["distill_scored_share"] == pytest.approx(2 / 3)
    nan = _inputs(logp=[[-1.0]], old=[[-1.0]], teacher=[[float("nan")]], scored=[[True]], adv=[0.0])
    with pytest.raises(ValueError, match="logp_teacher"):
        distill_term(nan, lam=1.0)


def test_the_wrapper_and_the_schedule():
    base = build_loss("pg")
    assert with_distillation(base, 0.0) is base
    with pytest.raises(ValueError):
        with_distillation(base, -1.0)
    no_teacher = _inputs(logp=[[-1.0]], old=[[-1.0]], teacher=[[-2.0]], scored=[[False]], adv=[1.0])
    assert float(with_distillation(base, 1.0)(no_teacher).loss.detach()) == pytest.approx(float(base(no_teacher).loss.detach()))
    assert [linear_lambda(s, start=1.0, end=0.0, steps=4) for s in (0, 2, 4, 9)] == [1.0, 0.5, 0.0, 0.0]
    assert linear_lambda(3, start=0.2, end=0.7, steps=0) == 0.7


def test_the_train_step_carries_a_rows_teacher_scores(tiny_qwen):
    rows = [Row(TokenRow([1, 2], [3, 4, 5]), [0.0] * 3, 0.0, True, 0.0, 0, False, logp_teacher=[-1.0, -2.0, -3.0]),
            Row(TokenRow([1, 2], [3, 4]), [0.0] * 2, 0.0, True, 0.0, 0, False, logp_teacher=[-1.0]),  # wrong length
            Row(TokenRow([1, 2], [3]), [0.0], 0.0, True, 0.0, 0, False)]
    inputs = loss_inputs(tiny_qwen.model, rows, 1.0, tiny_qwen.tokenizer.pad_token_id)
    assert inputs.teacher_scored.tolist() == [[True] * 3, [False] * 3, [False] * 3]
    assert inputs.logp_teacher[0].tolist() == [-1.0, -2.0, -3.0]
    assert loss_inputs(tiny_qwen.model, rows[2:], 1.0, 0).logp_teacher is None


def distill_run(spec: str, lam: float, *, steps: int = 8, lr: float = 3e-4, sigma: float = 1.0) -> tuple[float, float]:
    """(reverse KL before, after) of `steps` rounds of distillation alone (A_reward = 0) on the student's own
    samples (6 prompts × 8), the teacher a copy of the student with every weight perturbed by N(0, σ·its std)."""
    torch.manual_seed(0)
    loaded = load_model(ModelConfig(spec=spec))
    tok, model = loaded.tokenizer, loaded.model
    teacher = copy.deepcopy(model).eval()
    gen_noise = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in teacher.parameters():
            p.add_(torch.randn(p.shape, generator=gen_noise) * sigma * p.std().clamp(min=1e-3))
    prompts = [tok.apply_chat_template([{"role": "user", "content": f"Spell this word backward: {w}"}],
                                       tokenize=False, add_generation_prompt=True) for w in WORDS]
    gen = HFGenerator(model, tok, GenerationConfig(max_new_tokens=16, temperature=1.0))
    cfg = TrainConfig(lr=lr, micro_batch_rows=64)

    def rows_of(groups, scored: bool) -> list[Row]:
        rows = []
        for gid, (prompt, comps) in enumerate(zip(prompts, groups)):
            prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
            scores = score_for_requester(teacher, tok, prompt, [c.text for c in comps],
                                         [list(c.token_ids) for c in comps], same_tokenizer=True,
                                         max_tokens=1 << 16) if scored else [None] * len(comps)
            rows += [Row(TokenRow(prompt_ids, list(c.token_ids)), list(c.logprobs), sum(c.logprobs), True, 0.0, gid,
                         False, logp_teacher=s) for c, s in zip(comps, scores)]
        return rows

    @torch.no_grad()
    def reverse_kl(rows: list[Row]) -> float:  # exact Σ_v π_s log(π_s/π_T) per position, mean over tokens
        total, n = 0.0, 0
        for r in rows:
            ids, p, n_c = torch.tensor([r.tokens.prompt_ids + r.tokens.completion_ids]), len(r.tokens.prompt_ids), \
                len(r.tokens.completion_ids)
            ls = torch.log_softmax(model(input_ids=ids).logits[0, p - 1:p - 1 + n_c].float(), -1)
            lt = torch.log_softmax(teacher(input_ids=ids).logits[0, p - 1:p - 1 + n_c].float(), -1)
            total, n = total + float((ls.exp() * (ls - lt)).sum()), n + n_c
        return total / n

    fixed = rows_of(gen.generate(prompts, 8).groups, scored=False)
    before = reverse_kl(fixed)
    optimizer, loss_fn = build_optimizer(model, cfg), with_distillation(build_loss("pg"), lam)
    for step in range(steps):
        rows = rows_of(gen.generate(prompts, 8).groups, scored=True)
        result = train_step(model, optimizer, rows, loss_fn, cfg, temperature=1.0, pad_id=tok.pad_token_id)
        assert result.steps == 1
        gen.sync_weights(model, step + 1)
    model.eval()
    return before, reverse_kl(fixed)


def test_distillation_moves_the_student_towards_the_teacher_and_lambda_zero_does_not():
    before, after = distill_run("tiny-qwen2", lam=1.0)
    assert after < 0.85 * before, (before, after)  # measured: 0.0246 → 0.0160 (−35 %)
    before0, after0 = distill_run("tiny-qwen2", lam=0.0)
    assert before0 == pytest.approx(before)
    assert after0 >= 0.99 * before0, (before0, after0)  # no reward signal and λ = 0: nothing moves it


def test_chunk_gap_gives_every_token_of_a_chunk_the_chunks_gap():
    """Across tokenizers the gap is the chunk's: the student's log-probabilities summed over the chunk against the
    teacher's chunk log-probability (spread over the chunk's tokens, so their sum), on every token of the chunk."""
    from losses.distill import chunk_gap

    # one row, 4 tokens in chunks [0, 0, 1, 1]: e.g. "t" "e" | "n" "a"; a student confident in "e" after "t"
    student = torch.tensor([[-2.0, -0.01, -1.0, -0.05]])
    teacher_chunk_logp = [-1.5, -0.5]
    teacher = torch.tensor([[-0.75, -0.75, -0.25, -0.25]])  # each chunk's value spread over its tokens
    assert teacher[0, :2].sum() == teacher_chunk_logp[0]
    scored = torch.ones(1, 4, dtype=torch.bool)
    gap = chunk_gap(student - teacher, scored, torch.tensor([[0, 0, 1, 1]]))
    want = [-2.01 + 1.5] * 2 + [-1.05 + 0.5] * 2
    assert gap[0].tolist() == pytest.approx(want)
    # per-token gaps would push the confident continuation "e" down (gap +0.74): the chunk's pushes both up
    assert (student - teacher)[0, 1] > 0 and gap[0, 1] < 0
    assert torch.equal(chunk_gap(student - teacher, scored, None), student - teacher)  # one token per chunk
