"""What a teacher's values can do to a student's loss (losses/distill.py, TeacherBounds): the per-token and
per-completion clips of the gap, the sign guard on each row's combined advantage, and the peer floor on the
distillation term — with a real model (tiny-qwen2) for the rows and their log-probabilities."""

from __future__ import annotations

import pytest
import torch

from losses.distill import UNBOUNDED, TeacherBounds, distill_advantages, distill_term, with_distillation
from losses.registry import build_loss
from node.config import load_config
from node.distill.mode import teacher_bounds
from node.round.logprobs import TokenRow
from node.round.train import Row, loss_inputs
from tests.unit.node.test_distill_loss import _inputs

PROMPT = "User: spell it backwards: planet\n\nAssistant:"
REWARDED, FAILED = "<answer>tenalp</answer>", "<answer>tenlap</answer>"


def _rows(tok, teacher: float) -> list[Row]:
    """A rewarded and a failed answer of one group (A = ±1), each of its tokens scored `teacher` nats by a teacher."""
    prompt = tok(PROMPT, add_special_tokens=False)["input_ids"]
    rows = []
    for text, adv in ((REWARDED, 1.0), (FAILED, -1.0)):
        ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        rows.append(Row(TokenRow(prompt, ids), [0.0] * len(ids), 0.0, True, adv, 0, False,
                        logp_teacher=[teacher] * len(ids)))
    return rows


def _row_weights(model, tok, rows: list[Row], bounds: TeacherBounds) -> list[float]:
    """How hard the node's loss (F-TIS + distillation, λ = 1) pushes each row up: −Σ_t ∂L/∂log π_θ(y_t)."""
    inputs = loss_inputs(model, rows, 1.0, tok.pad_token_id)
    logp = inputs.logp.detach().requires_grad_()
    inputs = type(inputs)(**{**inputs.__dict__, "logp": logp, "logp_beh": inputs.logp_old})  # μ = π_old: on-policy
    with_distillation(build_loss("f-tis"), 1.0, bounds=bounds)(inputs).loss.backward()
    return [-float((logp.grad[i] * inputs.mask[i]).sum()) for i in range(len(rows))]


def test_a_teacher_answering_minus_20_nats_cannot_flip_the_sign_of_a_rewarded_or_a_failed_answer(tiny_qwen):
    """The issue's attack: a teacher scoring every token −20 nats. Bare, it turns the rewarded answer into one the
    step pushes down; bounded, each answer is pushed as its reward says (or not at all), never the other way."""
    tok, model = tiny_qwen.tokenizer, tiny_qwen.model
    rows = _rows(tok, -20.0)
    bare = _row_weights(model, tok, rows, UNBOUNDED)
    assert bare[0] < -1.0  # without the bounds the teacher alone flips the rewarded answer (the attack bites)
    rewarded, failed = _row_weights(model, tok, rows, TeacherBounds())
    assert rewarded >= -1e-6 and failed < 0, (rewarded, failed)
    # and through the advantages: the row's Σ_t A_t keeps the reward's sign, on both rows
    inputs = loss_inputs(model, rows, 1.0, tok.pad_token_id)
    sums = (distill_advantages(inputs, 1.0) * inputs.mask).sum(dim=1)
    assert float(sums[0]) >= -1e-4 and float(sums[1]) < 0


def test_a_teacher_that_praises_a_failed_answer_cannot_make_it_pushed_up(tiny_qwen):
    tok, model = tiny_qwen.tokenizer, tiny_qwen.model
    rows = _rows(tok, 0.0)  # log π_T = 0 on every token: "certain", the most a teacher can praise
    assert _row_weights(model, tok, rows, UNBOUNDED)[1] > 0  # bare: the failed answer would be pushed up
    assert _row_weights(model, tok, rows, TeacherBounds())[1] <= 1e-6


def test_the_per_token_and_per_completion_clips_bound_a_rows_gaps():
    # one own row of 4 tokens with a zero reward advantage (the teacher's signal alone, no guard), λ = 1
    inputs = _inputs(logp=[[-1.0] * 4], old=[[-1.0] * 4], teacher=[[-50.0, -3.0, -1.0, -30.0]],
                     scored=[[True] * 4], adv=[0.0])
    bare = distill_advantages(inputs, 1.0, UNBOUNDED)[0].tolist()
    assert bare == pytest.approx([-49.0, -2.0, 0.0, -29.0])
    clipped = distill_advantages(inputs, 1.0, TeacherBounds(token=10.0, completion=1e9))[0].tolist()
    assert clipped == pytest.approx([-10.0, -2.0, 0.0, -10.0])
    capped = distill_advantages(inputs, 1.0, TeacherBounds(token=10.0, completion=11.0))[0].tolist()
    assert capped == pytest.approx([-5.0, -1.0, 0.0, -5.0])  # Σ|d| 22 → 11: every gap halved
    _, metrics = distill_term(inputs, 1.0, bounds=TeacherBounds(token=10.0, completion=11.0))
    assert metrics["distill_clipped_share"] == pytest.approx(0.5) and metrics["distill_capped_share"] == 1.0


def test_where_no_bound_binds_the_term_is_the_bare_estimators_exactly(tiny_qwen):
    """An honest teacher of the same tokenizer (its gaps within the clips, the rows' signs its own): the bounded
    term equals the bare one to the bit, gradient included."""
    tok, model = tiny_qwen.tokenizer, tiny_qwen.model
    rows = _rows(tok, -1.0)
    for r, adv in zip(rows, (0.0, 0.0)):
        r.advantage = adv
    inputs = loss_inputs(model, rows, 1.0, tok.pad_token_id)
    inputs.logp_teacher.copy_(inputs.logp_old - torch.linspace(-2.0, 2.0, inputs.logp_old.shape[1]))
    assert torch.equal(distill_advantages(inputs, 1.0), distill_advantages(inputs, 1.0, UNBOUNDED))
    grads = []
    for bounds in (TeacherBounds(), UNBOUNDED):
        logp = inputs.logp.detach().requires_grad_()
        term, metrics = distill_term(type(inputs)(**{**inputs.__dict__, "logp": logp}), 1.0, bounds=bounds)
        term.backward()
        grads.append(logp.grad)
    assert torch.equal(grads[0], grads[1])
    assert metrics["distill_clipped_share"] == metrics["distill_guarded_share"] == 0.0


def test_the_peer_floor_applies_to_the_distillation_term(tiny_qwen):
    """train.peer_token_floor: a teacher's values give no gradient to our own tokens below the floor (span rest: nor
    to later ones), as a peer's row gives none to its tokens there; the node's bounds carry the floor."""
    inputs = _inputs(logp=[[-0.1, -9.0, -0.1]], old=[[-0.1, -9.0, -0.1]], teacher=[[-0.01, -0.01, -0.01]],
                     scored=[[True] * 3], adv=[0.0])
    term, _ = distill_term(inputs, 1.0, bounds=TeacherBounds(floor=0.01))
    term.backward()
    assert inputs.logp.grad[0, 0] != 0 and inputs.logp.grad[0, 1:].tolist() == [0.0, 0.0]
    cfg = load_config("examples/teacher/opd-student.yaml", {
        "train.peer_token_floor": 0.01, "train.peer_floor_span": "token", "distill.teachers": ["n1"],
        "distill.max_token_gap": 4.0, "distill.max_completion_gap": 40.0})
    assert teacher_bounds(cfg) == TeacherBounds(token=4.0, completion=40.0, floor=0.01, span="token")
