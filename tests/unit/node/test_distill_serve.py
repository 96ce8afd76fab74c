"""Serving scores under a budget (node/distill/serve.py) and a student's handling of answers (node/distill/student.py),
over the in-memory score stream (swarm/exchange/score_stream.py) with a real model as the teacher."""

from __future__ import annotations

import concurrent.futures
import threading
import time

import numpy as np
import pytest

from node.distill.config import DistillConfig
from node.distill.score import score_for_requester
from node.distill.serve import ScoreBudget, ScoreService, Teacher
from node.distill.student import Student
from node.round.groups import Group
from node.tasks.task import Task
from protocols.records import Completion, TaskRef
from protocols.score import (
    ScoreCaps,
    ScoreCompletion,
    ScoreRequest,
    ScoreResponse,
    decode_score_response,
    encode_score_request,
    encode_score_response,
    score_digest,
)
from swarm.exchange.twin import InMemoryHub, InMemoryTransport
from swarm.exchange.score_stream import MemoryScoreLink, ScoreFailed

SWARM = "rlswarm"
PROMPT = "User: spell it backwards: planet\n\nAssistant:"
TEXTS = ["<answer>tenalp</answer>", " tenlap"]


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_budget_refuses_beyond_a_requesters_share_and_the_total_and_refills():
    clock = Clock()
    b = ScoreBudget(100.0, 10.0, 0.5, clock=clock)  # 1000 tokens in all, 500 per requester; 50/s each
    assert b.take("a", 400) is None
    assert b.take("a", 200) == "over_share"  # only 100 left of a's 500
    assert b.take("b", 500) is None
    assert b.take("c", 200) == "over_budget"  # 100 left in all, though c has its 500
    clock.now = 2.0  # +200 in all, +100 for a
    assert b.take("a", 200) is None
    b.give_back("a", 150)
    assert b.take("a", 150) is None
    assert b.take("a", 1) == "over_share"


def _request(tok, fingerprint, vocab, texts=TEXTS, swarm=SWARM, ids=True):
    comps = []
    for t in texts:
        tid = tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        if ids:
            comps.append(ScoreCompletion(t, token_ids=tuple(tid)))
        else:
            comps.append(ScoreCompletion(t, token_bytes=tuple(len(tok.decode([i], skip_special_tokens=True).encode())
                                                               for i in tid)))
    req = ScoreRequest(swarm, PROMPT, tuple(comps), tokenizer=fingerprint if ids else None,
                       vocab_size=vocab if ids else None)
    return req, encode_score_request(req)


@pytest.fixture()
def served(tiny_qwen):
    calls = []
    hook = tiny_qwen.model.get_decoder().register_forward_pre_hook(lambda *_: calls.append(1))  # score_rows runs it
    teacher = Teacher(tiny_qwen.model, tiny_qwen.tokenizer, tiny_qwen.fingerprint, threading.RLock())
    service = ScoreService(teacher, SWARM, ScoreBudget(100.0, 10.0, 0.5), caps=ScoreCaps(), max_tokens=4096)
    yield service, calls
    hook.remove()


def test_service_answers_with_the_teachers_scores_and_charges_what_it_computed(tiny_qwen, served):
    service, calls = served
    tok = tiny_qwen.tokenizer
    req, data = _request(tok, tiny_qwen.fingerprint, tiny_qwen.vocab_size)
    status, out = service.answer("alice", data)
    assert status == "ok" and calls
    resp = decode_score_response(out, req, score_digest(data))
    want = score_for_requester(tiny_qwen.model, tok, PROMPT, TEXTS, [c.token_ids for c in req.completions],
                               same_tokenizer=True, max_tokens=4096)
    for got, ref in zip(resp.logprobs, want):
        assert got == pytest.approx(ref, abs=1e-5)
    counts, served_tokens, computed = service.take_counts()
    n_prompt = len(tok(PROMPT, add_special_tokens=False)["input_ids"])
    assert counts == {"ok": 1} and served_tokens == sum(c.n_tokens for c in req.completions)
    # charged what the forward pass computed: both rows padded to the longer completion
    assert computed == len(req.completions) * (n_prompt + max(c.n_tokens for c in req.completions))


def test_service_refuses_before_any_forward_pass(tiny_qwen, served):
    service, calls = served
    tok = tiny_qwen.tokenizer
    assert service.answer("a", b"\x00garbage")[0] == "zstd"
    assert service.answer("a", _request(tok, tiny_qwen.fingerprint, tiny_qwen.vocab_size, swarm="other")[1])[0] \
        == "wrong_swarm"
    assert service.answer("a", _request(tok, "0" * 64, tiny_qwen.vocab_size)[1])[0] == "wrong_tokenizer"
    # a request longer than the requester's share (500 tokens) can never be served, however often it comes
    big, _ = _request(tok, tiny_qwen.fingerprint, tiny_qwen.vocab_size, texts=["x" * 300, "y" * 300])
    for _ in range(3):
        assert service.answer("a", encode_score_request(big))[0] == "over_share"
    assert not calls
    assert service.take_counts()[0] == {"zstd": 1, "wrong_swarm": 1, "wrong_tokenizer": 1, "over_share": 3}


def test_a_requester_beyond_its_share_is_refused_at_once_while_another_is_served(tiny_qwen, served):
    service, calls = served
    _, data = _request(tiny_qwen.tokenizer, tiny_qwen.fingerprint, tiny_qwen.vocab_size)
    statuses = [service.answer("greedy", data)[0] for _ in range(20)]
    assert statuses[0] == "ok" and statuses[-1] == "over_share"
    served_ok = statuses.count("ok")
    assert served_ok < 20 and len(calls) == served_ok  # refused requests cost no forward pass
    assert service.answer("modest", data)[0] == "ok"


def _group(tok, texts=TEXTS) -> Group:
    comps = [Completion(t, tuple(tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]),
                        tuple([-1.0] * (len(tok(t, add_special_tokens=False)["input_ids"]) + 1)), "stop")
             for t in texts]
    task = Task(TaskRef("spell_backward", {}, 0, 0), "planet", "tenalp", {})
    return Group(task, comps, [0.0] * len(comps), [0.0] * len(comps))


def _student(loaded, link, **cfg) -> Student:
    return Student(DistillConfig(teachers=["teacher"], **cfg), link, swarm_id=SWARM, tokenizer=loaded.tokenizer,
                   fingerprint=loaded.fingerprint, vocab_size=loaded.vocab_size, temperature=1.0, caps=ScoreCaps())


def _link(hub, peer):
    return MemoryScoreLink(InMemoryTransport(hub, peer, SWARM), max_bytes=1 << 20)


def test_student_trains_on_an_honest_answer(tiny_qwen, served):
    service, _ = served
    hub = InMemoryHub()
    _link(hub, "teacher").serve(service.answer)
    student = _student(tiny_qwen, _link(hub, "student"))
    group = _group(tiny_qwen.tokenizer)
    assert not group.informative  # equal rewards: no signal until a teacher scores it
    metrics = student.collect(student.ask(0, [group], [PROMPT]))
    assert metrics["distill_answers"] == 1 and metrics["distill_share_scored"] == 1.0 and not metrics["distill_drops"]
    assert [len(x) for x in group.teacher_logps] == [len(c.token_ids) for c in group.completions]
    assert group.informative


def _hostile(kind: str):
    def answer(_requester: str, data: bytes) -> tuple[str, bytes]:
        from protocols.score import decode_score_request

        req = decode_score_request(data)
        values = [tuple([-0.5] * c.n_tokens) for c in req.completions]
        digest = score_digest(data)
        if kind == "refuse":
            return "over_budget", b""
        if kind == "garbage":
            return "ok", b"\x28\xb5\x2f\xfd not really zstd"
        if kind == "wrong_request":
            digest = score_digest(data + b"x")
        if kind == "more_pieces":
            values = [v + (-0.5,) for v in values]
        if kind == "fewer_arrays":
            values = values[:-1]
        # one chunk of all its tokens on an id request: each token would be charged the whole completion's gap
        chunks = tuple((c.n_tokens,) for c in req.completions) if kind == "chunks_on_ids" else None
        out = encode_score_response(ScoreResponse(digest, tuple(values), chunks))
        if kind in ("nan", "positive", "absurd"):  # forged after encoding (an encoder refuses them)
            import numpy as np

            from protocols.codec import _compress

            bad = {"nan": float("nan"), "positive": 0.5, "absurd": -1e9}[kind]
            arrays = [np.full(c.n_tokens, bad, "<f4").tobytes() for c in req.completions]
            out = _compress({"v": 1, "request": digest, "lp": "f32", "logprobs": arrays})
        return "ok", out
    return answer


@pytest.mark.parametrize("kind,reason", [
    ("refuse", "refused:over_budget"), ("garbage", "zstd"), ("wrong_request", "wrong_request"),
    ("more_pieces", "length_mismatch"), ("fewer_arrays", "length_mismatch"), ("nan", "bad_logprob"),
    ("positive", "bad_logprob"), ("absurd", "bad_logprob"), ("absent", "unreachable"),
    ("chunks_on_ids", "wrong_request")])
def test_student_drops_a_hostile_teachers_answer_with_its_reason(tiny_qwen, kind, reason):
    hub = InMemoryHub()
    if kind != "absent":
        _link(hub, "teacher").serve(_hostile(kind))
    student = _student(tiny_qwen, _link(hub, "student"))
    group = _group(tiny_qwen.tokenizer)
    metrics = student.collect(student.ask(0, [group], [PROMPT]))
    assert metrics["distill_drops"] == {reason: 1} and metrics["distill_answers"] == 0
    assert group.teacher_logps is None and not group.informative  # the group trains on the reward alone


class NeverLink:
    peer_id = "student"

    def __init__(self):
        self.futures = []

    def ask(self, peer, data):
        self.futures.append(concurrent.futures.Future())
        return self.futures[-1]


def test_a_late_answer_is_dropped_after_wait_s_and_never_used(tiny_qwen):
    link = NeverLink()
    student = _student(tiny_qwen, link, wait_s=0.3)
    group = _group(tiny_qwen.tokenizer)
    started = time.monotonic()
    metrics = student.collect(student.ask(0, [group, _group(tiny_qwen.tokenizer)], [PROMPT, PROMPT]))
    assert 0.25 < time.monotonic() - started < 2.0  # one bound for the round, not one per request
    assert metrics["distill_drops"] == {"late": 2} and group.teacher_logps is None
    assert all(f.cancelled() for f in link.futures)


def test_a_teacher_of_another_tokenizer_gets_token_bytes_after_refusing_ids(tiny_qwen, tiny_llama):
    """A teacher that refuses our ids (`wrong_tokenizer`) is sent the bytes of each token at once, within the same
    wait, and from then on; it scores them through the chunk alignment: one value per student token."""
    teacher = Teacher(tiny_llama.model, tiny_llama.tokenizer, tiny_llama.fingerprint, threading.RLock())
    service = ScoreService(teacher, SWARM, ScoreBudget(1e6, 10.0, 0.5), caps=ScoreCaps(), max_tokens=4096)
    hub = InMemoryHub()
    _link(hub, "teacher").serve(service.answer)
    student = _student(tiny_qwen, _link(hub, "student"))
    first = _group(tiny_qwen.tokenizer)
    metrics = student.collect(student.ask(0, [first], [PROMPT]))
    assert metrics["distill_retried"] == metrics["distill_answers"] == 1 and not metrics["distill_drops"], metrics
    assert [len(x) for x in first.teacher_logps] == [len(c.token_ids) for c in first.completions]
    second = _group(tiny_qwen.tokenizer)
    metrics = student.collect(student.ask(1, [second], [PROMPT]))
    assert metrics["distill_answers"] == 1 and metrics["distill_retried"] == 0, metrics
    assert [len(x) for x in second.teacher_logps] == [len(c.token_ids) for c in second.completions]
    assert [sum(x) for x in second.teacher_chunks] == [len(c.token_ids) for c in second.completions]


def test_memory_link_refuses_oversized_messages():
    hub = InMemoryHub()
    _link(hub, "teacher").serve(lambda _r, _d: ("ok", b"x" * 100))
    small = MemoryScoreLink(InMemoryTransport(hub, "student", SWARM), max_bytes=50)
    with pytest.raises(ScoreFailed) as exc:
        small.ask("teacher", b"y" * 10).result()
    assert exc.value.reason == "too_large"


def test_a_response_carries_the_chunks_and_rejects_lengths_that_do_not_add_up(tiny_qwen):
    req, data = _request(tiny_qwen.tokenizer, tiny_qwen.fingerprint, tiny_qwen.vocab_size, ids=False)
    n = [c.n_tokens for c in req.completions]
    good = ScoreResponse(score_digest(data), tuple(tuple([-0.5] * k) for k in n), ((1, n[0] - 1), ()))
    back = decode_score_response(encode_score_response(good), req, score_digest(data))
    assert back.chunks == ((1, n[0] - 1), ())
    with pytest.raises(ValueError):  # an encoder refuses lengths that do not add up
        encode_score_response(ScoreResponse(good.request, good.logprobs, ((1, n[0]), ())))
    import numpy as np

    from protocols.codec import RecordError, _compress

    forged = _compress({"v": 1, "request": good.request, "lp": "f32",
                        "logprobs": [np.full(k, -0.5, "<f4").tobytes() for k in n],
                        "chunks": [np.array([1, n[0]], "<u2").tobytes(), b""]})
    with pytest.raises(RecordError) as exc:
        decode_score_response(forged, req, score_digest(data))
    assert exc.value.reason == "length_mismatch"


def test_send_ids_off_takes_the_byte_path_and_the_requester_split_gives_the_id_paths_scores(tiny_qwen, served):
    """`distill.send_ids: false` sends token bytes to a teacher of our own tokenizer; a teacher serving with
    `score_split: requester` then answers what the id path answers: each of our tokens as sampled, and the EOS
    that ended it against the teacher's own EOS, each a chunk of one token."""
    service, _ = served
    split = ScoreService(service.teacher, SWARM, ScoreBudget(1e6, 10.0, 0.5), caps=ScoreCaps(), max_tokens=4096,
                         split="requester")
    hub = InMemoryHub()
    _link(hub, "teacher").serve(service.answer)
    _link(hub, "teacher2").serve(split.answer)
    by_id, by_bytes = _group(tiny_qwen.tokenizer), _group(tiny_qwen.tokenizer)
    student = _student(tiny_qwen, _link(hub, "student"))
    assert student.collect(student.ask(0, [by_id], [PROMPT]))["distill_answers"] == 1
    bytes_student = Student(DistillConfig(teachers=["teacher2"], send_ids=False), _link(hub, "student2"),
                            swarm_id=SWARM, tokenizer=tiny_qwen.tokenizer, fingerprint=tiny_qwen.fingerprint,
                            vocab_size=tiny_qwen.vocab_size, temperature=1.0, caps=ScoreCaps())
    asked = bytes_student.ask(0, [by_bytes], [PROMPT])
    assert all(p.request.tokenizer is None for p in asked.pending)  # no ids travelled
    assert bytes_student.collect(asked)["distill_answers"] == 1
    for a, b, chunks in zip(by_id.teacher_logps, by_bytes.teacher_logps, by_bytes.teacher_chunks):
        assert all(n == 1 for n in chunks)  # these texts: one token a chunk, the EOS too
        assert np.allclose(a, b, atol=1e-4)


@pytest.mark.parametrize("split", ["canonical", "requester"])
def test_on_the_byte_path_our_special_tokens_in_a_chunk_of_text_are_left_unscored(tiny_qwen, tiny_llama, split):
    """Across tokenizers our EOS produces no text. Under `canonical` it shares the last text token's chunk, with
    nothing of the teacher's against it: it is left unscored and the chunk's value goes to the text token (its
    own log-probability in the gap would reward sampling it the less likely it is). Under `requester` it is a
    chunk of its own against the teacher's EOS, and keeps that value."""
    teacher = Teacher(tiny_llama.model, tiny_llama.tokenizer, tiny_llama.fingerprint, threading.RLock())
    service = ScoreService(teacher, SWARM, ScoreBudget(1e6, 10.0, 0.5), caps=ScoreCaps(), max_tokens=4096, split=split)
    hub = InMemoryHub()
    _link(hub, "teacher").serve(service.answer)
    student = _student(tiny_qwen, _link(hub, "student"), send_ids=False)
    group = _group(tiny_qwen.tokenizer)
    assert student.collect(student.ask(0, [group], [PROMPT]))["distill_answers"] == 1
    for comp, values, chunks in zip(group.completions, group.teacher_logps, group.teacher_chunks):
        assert comp.token_ids[-1] == tiny_qwen.tokenizer.eos_token_id and len(values) == len(comp.token_ids)
        if split == "canonical":
            assert values[-1] is None and chunks[-1] >= 2  # the EOS: unscored, in the last text token's chunk
            assert all(v is not None for v in values[:-1])
        else:
            assert chunks[-1] == 1 and values[-1] is not None and values[-1] < 0  # the teacher's EOS


def test_on_the_byte_path_a_completion_whose_text_lost_bytes_is_left_unscored(tiny_qwen, tiny_llama):
    """A sampled byte that is no UTF-8 text decodes to U+FFFD: the text no longer holds what was sampled, and the
    teacher would score that character's bytes instead. Such a completion trains on its reward alone."""
    tok = tiny_qwen.tokenizer
    stray = next(i for i in range(tiny_qwen.vocab_size) if tok.decode([i]) == "\ufffd")
    ids = tok("<answer>ab", add_special_tokens=False)["input_ids"] + [stray] + \
        tok("</answer>", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    text = tok.decode(ids, skip_special_tokens=True)
    assert "\ufffd" in text
    teacher = Teacher(tiny_llama.model, tiny_llama.tokenizer, tiny_llama.fingerprint, threading.RLock())
    service = ScoreService(teacher, SWARM, ScoreBudget(1e6, 10.0, 0.5), caps=ScoreCaps(), max_tokens=4096,
                           split="requester")
    hub = InMemoryHub()
    _link(hub, "teacher").serve(service.answer)
    student = _student(tiny_qwen, _link(hub, "student"), send_ids=False)
    group = _group(tok)
    group.completions[0] = Completion(text, tuple(ids), tuple([-1.0] * len(ids)), "stop")
    assert student.collect(student.ask(0, [group], [PROMPT]))["distill_answers"] == 1
    assert group.teacher_logps[0] is None and all(v is not None for v in group.teacher_logps[1])
