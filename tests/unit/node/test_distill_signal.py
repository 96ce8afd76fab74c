"""The cross-tokenizer signals of losses/distill.py (`distill.cross_signal`, docs/benchmarks/learning.md §12F): DPCA's credit,
the EOS term, the off-split gap, and that with one token per chunk every signal is today's one-token OPD."""

from __future__ import annotations

import math

import pytest
import torch

from losses.base import LossInputs
from losses.distill import (
    EOS,
    OFF_SPLIT,
    TEXT,
    UNBOUNDED,
    TeacherBounds,
    distill_term,
    eos_coefficient,
    teacher_advantages,
)


def _inputs(old, teacher, chunk=None, kind=None, adv=0.0) -> LossInputs:
    T = len(old)
    lp = torch.tensor([old], requires_grad=True)
    return LossInputs(
        logp=lp, logp_old=torch.tensor([old]), logp_beh=torch.tensor([old]), logp_beh_seq=torch.zeros(1),
        beh_aligned=torch.ones(1, dtype=torch.bool), mask=torch.ones(1, T), advantages=torch.tensor([adv]),
        group_ids=torch.zeros(1, dtype=torch.long), is_external=torch.tensor([False]),
        logp_teacher=torch.tensor([teacher]), teacher_scored=torch.ones(1, T, dtype=torch.bool),
        teacher_chunk=None if chunk is None else torch.tensor([chunk]),
        teacher_kind=None if kind is None else torch.tensor([kind]))


def _tau(inputs, signal, bounds=UNBOUNDED):
    return [round(x, 6) for x in teacher_advantages(inputs, 1.0, bounds, signal)[0][0].tolist()]


@pytest.mark.parametrize("chunk", [None, [0, 1, 2]])
@pytest.mark.parametrize("kind", [None, [TEXT, TEXT, TEXT]])
def test_one_token_a_chunk_every_signal_is_todays_opd(chunk, kind):
    # gaps log π_old − log π_T: −0.5 − (−1.0) = 0.5, −1.0 − (−0.5) = −0.5, −2.0 − (−2.5) = 0.5; τ = −λ·gap, λ = 1
    inputs = _inputs([-0.5, -1.0, -2.0], [-1.0, -0.5, -2.5], chunk, kind)
    for signal in ("chunk", "dpca", "exact"):
        assert _tau(inputs, signal) == [-0.5, 0.5, -0.5], signal


def test_dpca_shares_the_chunk_gap_by_the_students_own_log_probabilities():
    # one chunk of two student tokens: log p = −1, −3 (L_S = −4); the teacher's chunk value −3 spread evenly (−1.5 each)
    # d_c = L_S − L_T = −4 − (−3) = −1. chunk: every token −d_c = +1. DPCA: credit (L_T / L_S − 1)·log p_i =
    # (3/4 − 1)·(−1) = +0.25 and (3/4 − 1)·(−3) = +0.75, adding up to L_T − L_S = +1
    inputs = _inputs([-1.0, -3.0], [-1.5, -1.5], chunk=[0, 0], kind=[TEXT, TEXT])
    assert _tau(inputs, "chunk") == [1.0, 1.0]
    assert _tau(inputs, "dpca") == [0.25, 0.75]
    # near-certain tokens (|L_S| < 1e-6): the chunk's gap in equal parts
    flat = _inputs([0.0, 0.0], [-1.0, -1.0], chunk=[0, 0], kind=[TEXT, TEXT])
    assert _tau(flat, "dpca") == [-1.0, -1.0]  # d_c = 0 − (−2) = 2, halves of 1 each, τ = −1


def test_the_final_eos_gets_the_forward_kl_term_not_the_gap():
    # student π_old(EOS) = 0.5, teacher p_T(EOS) = 0.1: coefficient −p_T + (1 − p_T)·p_S/(1 − p_S) = −0.1 + 0.9 = 0.8,
    # τ = −0.8 (the student's stop pushed down towards the teacher's); KL(Bern(0.1) ‖ Bern(0.5)) =
    # 0.1·ln(0.2) + 0.9·ln(1.8) = −0.16094 + 0.52901 = 0.36807
    old, teacher = [-1.0, math.log(0.5)], [-2.0, math.log(0.1)]
    inputs = _inputs(old, teacher, chunk=[0, 1], kind=[TEXT, EOS])
    assert _tau(inputs, "dpca") == [-1.0, -0.8]
    assert _tau(inputs, "chunk") == [-1.0, round(-(math.log(0.5) - math.log(0.1)), 6)]  # today: the EOS in the gap
    coef, kl = eos_coefficient(torch.tensor(math.log(0.5)), torch.tensor(math.log(0.1)))
    assert float(coef) == pytest.approx(0.8, abs=1e-6) and float(kl) == pytest.approx(0.36807, abs=1e-5)
    _, metrics = distill_term(inputs, 1.0, bounds=UNBOUNDED, signal="dpca")
    assert metrics["distill_eos_kl"] == pytest.approx(0.36807, abs=1e-5)
    assert metrics["distill_kl"] == pytest.approx(1.0)  # the text token's gap alone: −1 − (−2)
    # a teacher that never stops (p_T ≈ 0) against a student sure to stop: the coefficient is bounded by the clip
    sure = _inputs([-1.0, math.log(0.999999)], [-2.0, -30.0], chunk=[0, 1], kind=[TEXT, EOS])
    assert _tau(sure, "dpca", TeacherBounds(guard=False)) == [-1.0, -10.0]


def test_exact_gives_an_off_split_token_the_clip_and_the_bounds_still_apply():
    # token 1 is where our sampled split is not our tokenizer's own: the teacher's text distribution, written in our
    # tokens, gives it probability 0; its gap is the clip (10 nats), counted as clipped
    inputs = _inputs([-0.5, -1.0, -2.0], [-1.0, -0.5, -2.5], chunk=[0, 1, 2], kind=[TEXT, OFF_SPLIT, TEXT])
    bounds = TeacherBounds(guard=False)
    assert _tau(inputs, "exact", bounds) == [-0.5, -10.0, -0.5]
    assert _tau(inputs, "dpca", bounds) == [-0.5, 0.5, -0.5]  # dpca: the off-split token's own gap
    _, metrics = distill_term(inputs, 1.0, bounds=bounds, signal="exact")
    assert metrics["distill_clipped_share"] == pytest.approx(1 / 3)
    # the sign guard: a rewarded answer (A = 0.5, 3 tokens: room 1.5) is never pushed below 0 by the teacher
    guarded = _inputs([-0.5, -1.0, -2.0], [-1.0, -0.5, -2.5], chunk=[0, 1, 2], kind=[TEXT, OFF_SPLIT, TEXT], adv=0.5)
    tau, _, stats = teacher_advantages(guarded, 1.0, TeacherBounds(), "exact")
    assert float(tau.sum()) == pytest.approx(-1.5) and stats["guarded"] == 1


def test_an_unknown_signal_is_refused():
    with pytest.raises(ValueError, match="signal"):
        teacher_advantages(_inputs([-1.0], [-1.0]), 1.0, UNBOUNDED, "marginal")


def test_the_student_marks_its_final_eos_and_the_tokens_it_split_otherwise_than_its_tokenizer():
    """node.distill.student marks, on the byte path, our final EOS (a chunk of its own) and the tokens where our
    sampled split is not our tokenizer's own tokenization of the text (the real lab-spell-wide tokenizer)."""
    from node.distill.config import DistillConfig
    from node.distill.student import Student
    from node.models.config import ModelConfig
    from node.models.load import load_model
    from protocols.records import Completion
    from protocols.score import ScoreCaps

    tok = load_model(ModelConfig(spec="lab-spell-wide")).tokenizer
    student = Student(DistillConfig(teachers=["t"]), None, swarm_id="s", tokenizer=tok, fingerprint="f" * 64,
                      vocab_size=len(tok), temperature=1.0, caps=ScoreCaps())
    text = "<answer>tenalp</answer>"
    canon = tok(text, add_special_tokens=False)["input_ids"]
    j = next(i for i, t in enumerate(canon) if len(tok.decode([t])) == 2 and tok.decode([t]).isalpha())
    piece = tok.decode([canon[j]])
    a, b = (tok(x, add_special_tokens=False)["input_ids"] for x in piece)
    other = canon[:j] + a + b + canon[j + 1:]
    eos = tok.eos_token_id

    def completion(ids):
        return Completion(text=text, token_ids=tuple(ids), logprobs=tuple([-1.0] * len(ids)), finish_reason="stop")

    kinds, off = student._kinds([1] * (len(canon) + 1), completion(canon + [eos]))
    assert kinds == [TEXT] * len(canon) + [EOS] and not off
    kinds, off = student._kinds([1] * (len(other) + 1), completion(other + [eos]))
    assert off and kinds == [TEXT] * j + [OFF_SPLIT] * 2 + [TEXT] * (len(canon) - j - 1) + [EOS]
    # an EOS that shares its chunk with text (the teacher scored no end of its own) is no EOS term
    kinds, _ = student._kinds([1] * (len(canon) - 1) + [2], completion(canon + [eos]))
    assert kinds[-1] == TEXT


def test_the_train_step_carries_each_tokens_kind_to_the_loss():
    from node.round.logprobs import TokenRow
    from node.round.train import Row, _teacher_scores

    def row(kind):
        return Row(TokenRow([1], [5, 6, 7]), [-1.0] * 3, -3.0, True, 0.0, 0, False, logp_teacher=[-1.0, -2.0, -3.0],
                   teacher_chunks=[2, 1], teacher_kind=kind)

    mask = torch.ones(2, 4)
    teacher, scored, chunk, kind = _teacher_scores([row([TEXT, OFF_SPLIT, EOS]), row(None)], mask)
    assert kind.tolist() == [[TEXT, OFF_SPLIT, EOS, TEXT], [TEXT] * 4] and chunk[0, :3].tolist() == [0, 0, 1]
    assert _teacher_scores([row(None)], torch.ones(1, 3))[3] is None  # no row with kinds (the id path): None


def test_at_one_tokenizer_every_signal_trains_the_student_the_same(tmp_path):
    """Real nodes (tiny-qwen2 student, a tiny-qwen2 teacher of perturbed weights; the id path: one token per chunk, no
    token marked): two rounds of
    distillation leave the same weights and the same metrics under `chunk`, `dpca` and `exact`. The teacher's term
    does move them (λ = 0 leaves other weights), so the comparison can see a signal that differs."""
    from node.config import parse_config
    from node.node import Node
    from node.round.loop import run_round
    from swarm.exchange.twin import InMemoryHub, InMemoryTransport

    from tests.unit.node.test_distill_teachers import _config

    def config(name: str, seed: int, **distill) -> dict:  # the teacher tests' node, taking no peers' groups
        cfg = _config(name, seed, wait_s=60.0, **distill)
        cfg["select"]["external_groups"] = 0
        return cfg

    def run(signal: str, coef: float):
        hub = InMemoryHub()
        nodes = [Node(parse_config(config(name, seed, **distill)), tmp_path / f"{signal}{coef}" / name,
                      transport=InMemoryTransport(hub, name, "rlswarm", poll_interval_s=0.01))
                 for name, seed, distill in (("n1", 1, {"serve": True, "serve_tokens_per_s": 1e9}),
                                             ("n0", 0, {"teachers": ["n1"], "cross_signal": signal, "coef": coef}))]
        teacher, student = nodes
        gen = torch.Generator().manual_seed(7)  # a teacher of other weights (the same built model would give gap 0)
        with torch.no_grad():
            for p in teacher.model.parameters():
                p.add_(0.2 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
        try:
            rows = []
            for r in range(2):
                run_round(teacher, r)
                rows.append(run_round(student, r).line())
            weights = [p.detach().clone() for p in student.model.parameters()]
        finally:
            for n in nodes:
                n.close()
        assert all(m["distill_answers"] == 1 and m["distill_tokens_scored"] > 0 for m in rows), rows
        keys = ("distill_kl", "distill_clipped_share", "distill_guarded_share", "distill_tokens_scored")
        return weights, [{k: m.get(k) for k in keys} for m in rows]

    chunk_w, chunk_m = run("chunk", 1.0)
    assert all(m["distill_kl"] != 0.0 for m in chunk_m), chunk_m
    for signal in ("dpca", "exact"):
        w, m = run(signal, 1.0)
        assert m == chunk_m, (signal, m, chunk_m)
        assert all(torch.equal(a, b) for a, b in zip(w, chunk_w)), signal
    untaught, _ = run("chunk", 0.0)
    assert not all(torch.equal(a, b) for a, b in zip(untaught, chunk_w))
