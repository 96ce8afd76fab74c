"""A teacher's serving that identities cannot game and requests cannot crash (node/distill/serve.py,
node/distill/score.py, protocols/score.py, swarm/exchange/admission.py), with a real model (tiny-qwen2) as the
teacher: charges taken before tokenizing and kept for work done, the padded cost charged, the model's context
checked before the forward pass, a named student's part untouched by a crowd of strangers, every request answered
with a status of docs/PROTOCOL.md §11, and stream admissions kept apart by protocol."""

from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path

import pytest

from node.distill.score import score_for_requester
from node.distill.serve import ScoreBudget, ScoreService, Teacher
from protocols.codec import _compress, _unpack, _decompress
from protocols.score import (
    ScoreCaps,
    ScoreCompletion,
    ScoreRequest,
    decode_score_response,
    encode_score_request,
    score_digest,
)
from swarm.exchange.admission import StreamGuards
from tests.unit.node.test_distill_serve import PROMPT, SWARM, Clock

ROOT = Path(__file__).resolve().parents[3]


def _ids(tok, text: str) -> tuple[int, ...]:
    return tuple(tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id])


def _bytes(tok, ids) -> tuple[int, ...]:
    return tuple(len(tok.decode([i], skip_special_tokens=True).encode()) for i in ids)


HOOKS: list = []  # forward hooks a test put on the shared model, removed after it


def _hook(loaded, fn) -> None:
    HOOKS.append(loaded.model.get_decoder().register_forward_pre_hook(fn))


def _service(loaded, budget: ScoreBudget, max_tokens: int = 4096) -> tuple[ScoreService, list]:
    """A service on the model, and the list its forward passes append to."""
    calls: list = []
    _hook(loaded, lambda *_: calls.append(1))
    teacher = Teacher(loaded.model, loaded.tokenizer, loaded.fingerprint, threading.RLock())
    return ScoreService(teacher, SWARM, budget, caps=ScoreCaps(), max_tokens=max_tokens), calls


@pytest.fixture()
def teacher(tiny_qwen):
    yield tiny_qwen
    while HOOKS:
        HOOKS.pop().remove()


def _left(budget: ScoreBudget, requester: str, most: int) -> int:
    """What `requester` can still take (its part, found by taking; the clock stands still)."""
    lo, hi = 0, most
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if budget.take(requester, mid) is None:
            budget.give_back(requester, mid)
            lo = mid
        else:
            hi = mid - 1
    return lo


def test_a_request_refused_after_tokenizing_keeps_its_charge(teacher):
    tok = teacher.tokenizer
    budget = ScoreBudget(1.0, 1000.0, 1.0, clock=Clock())  # 1000 positions, no refill while the clock stands
    service, calls = _service(teacher, budget, max_tokens=40)
    text = "<answer>tenalp</answer> " * 4
    req = ScoreRequest(SWARM, PROMPT, (ScoreCompletion(text, token_bytes=_bytes(tok, _ids(tok, text))),))
    assert service.answer("a", encode_score_request(req))[0] == "over_budget"  # found out only by tokenizing
    assert not calls and _left(budget, "a", 1000) == 1000 - 40  # the 40 taken before tokenizing stay taken


def test_an_error_while_scoring_answers_internal_error_and_keeps_the_charge(teacher):
    tok = teacher.tokenizer
    budget = ScoreBudget(1.0, 1000.0, 1.0, clock=Clock())
    service, _ = _service(teacher, budget)

    def out_of_memory(*_):
        raise RuntimeError("CUDA out of memory (simulated)")
    _hook(teacher, out_of_memory)
    req = ScoreRequest(SWARM, PROMPT, (ScoreCompletion("ab", token_ids=_ids(tok, "ab")),),
                       tokenizer=teacher.fingerprint, vocab_size=teacher.vocab_size)
    assert service.answer("a", encode_score_request(req)) == ("internal_error", b"")
    assert _left(budget, "a", 1000) < 1000  # nothing given back for a forward pass that ran and failed


def test_the_charge_is_the_padded_cost_of_the_forward_pass(teacher):
    tok = teacher.tokenizer
    budget = ScoreBudget(1.0, 10_000.0, 1.0, clock=Clock())
    service, _ = _service(teacher, budget)
    short, long = _ids(tok, "a"), _ids(tok, "<answer>tenalp tenalp tenalp</answer>")
    req = ScoreRequest(SWARM, PROMPT, (ScoreCompletion("a", token_ids=short),
                                       ScoreCompletion("<answer>tenalp tenalp tenalp</answer>", token_ids=long)),
                       tokenizer=teacher.fingerprint, vocab_size=teacher.vocab_size)
    assert service.answer("a", encode_score_request(req))[0] == "ok"
    n_prompt = len(tok(PROMPT, add_special_tokens=False)["input_ids"])
    padded = 2 * (n_prompt + len(long))  # one forward of [2, prompt + longest]
    assert service.take_counts()[2] == padded
    assert _left(budget, "a", 10_000) == 10_000 - padded


def test_the_models_context_is_checked_before_the_forward_pass(teacher):
    tok, config = teacher.tokenizer, teacher.model.config
    n_prompt = len(tok(PROMPT, add_special_tokens=False)["input_ids"])
    text = "<answer>tenalp</answer>"
    was = config.max_position_embeddings
    config.max_position_embeddings = n_prompt + 3  # a completion of more than 3 tokens does not fit
    try:
        service, calls = _service(teacher, ScoreBudget(1e6, 10.0, 1.0))
        req = ScoreRequest(SWARM, PROMPT, (ScoreCompletion(text, token_ids=_ids(tok, text)),),
                           tokenizer=teacher.fingerprint, vocab_size=teacher.vocab_size)
        assert service.answer("a", encode_score_request(req))[0] == "context_overflow"
        assert not calls
    finally:
        config.max_position_embeddings = was


def test_a_crowd_of_identities_cannot_take_a_named_students_part_and_shares_one_pool():
    budget = ScoreBudget(10.0, 100.0, 0.5, students=["alice"], stranger_share=0.25, clock=Clock())  # 1000 in all
    taken = 0
    for i in range(50):  # 50 identities, each taking all it is given
        while budget.take(f"sybil{i}", 25) is None:
            taken += 25
    assert taken == 250  # strangers together: their pool of 25 %, however many they are
    assert _left(budget, "alice", 1000) == 750  # the named student keeps the rest, all of it
    assert budget.take("alice", 751) == "over_share"
    assert budget.take("sybil0", 1) in ("over_share", "over_budget")
    alone = ScoreBudget(10.0, 100.0, 0.5, clock=Clock())  # no student named: strangers share everything
    assert _left(alone, "bob", 1000) == 500  # one stranger: at most serve_share of it


def test_a_request_mixing_token_ids_and_token_bytes_is_scored_each_by_its_path(teacher):
    tok = teacher.tokenizer
    service, _ = _service(teacher, ScoreBudget(1e6, 10.0, 1.0))
    texts = ["<answer>tenalp</answer>", " tenlap"]
    ids = [_ids(tok, t) for t in texts]
    req = ScoreRequest(SWARM, PROMPT, (ScoreCompletion(texts[0], token_ids=ids[0]),
                                       ScoreCompletion(texts[1], token_bytes=_bytes(tok, ids[1]))),
                       tokenizer=teacher.fingerprint, vocab_size=teacher.vocab_size)
    data = encode_score_request(req)
    status, out = service.answer("a", data)
    assert status == "ok"
    got = decode_score_response(out, req, score_digest(data)).logprobs
    want = score_for_requester(teacher.model, tok, PROMPT, texts, ids, same_tokenizer=True, max_tokens=4096)
    for g, w in zip(got, want):
        assert g == pytest.approx(w, abs=1e-4)  # one tokenizer: the byte path gives the id path's values


def test_a_bytes_only_request_naming_a_tokenizer_is_refused_as_schema(teacher):
    tok = teacher.tokenizer
    service, calls = _service(teacher, ScoreBudget(1e6, 10.0, 1.0))
    req = ScoreRequest(SWARM, PROMPT, (ScoreCompletion("ab", token_bytes=_bytes(tok, _ids(tok, "ab"))),))
    d = _unpack(_decompress(encode_score_request(req), ScoreCaps().codec_caps()), ScoreCaps().codec_caps())
    d |= {"tokenizer": teacher.fingerprint, "vocab_size": teacher.vocab_size}
    assert service.answer("a", _compress(d)) == ("schema", b"")
    assert not calls


def test_response_keys_are_the_ones_protocol_11_lists(teacher):
    """§11's response table names every key a teacher writes: `chunks` on a byte-path answer, none on an id one."""
    doc = (ROOT / "docs" / "PROTOCOL.md").read_text()
    section = doc[doc.index("## 11. Score requests"):]
    table = section[section.index("**Response.**"):section.index("**Caps**")]
    listed = set(re.findall(r"^\| `([a-z_]+)` \|", table, re.M))
    tok = teacher.tokenizer
    service, _ = _service(teacher, ScoreBudget(1e6, 10.0, 1.0))
    ids = _ids(tok, "<answer>tenalp</answer>")
    for req in (ScoreRequest(SWARM, PROMPT, (ScoreCompletion("<answer>tenalp</answer>", token_ids=ids),),
                             tokenizer=teacher.fingerprint, vocab_size=teacher.vocab_size),
                ScoreRequest(SWARM, PROMPT, (ScoreCompletion("<answer>tenalp</answer>", token_bytes=_bytes(tok, ids)),))):
        status, out = service.answer("a", encode_score_request(req))
        keys = set(_unpack(_decompress(out, ScoreCaps().codec_caps()), ScoreCaps().codec_caps()))
        assert status == "ok" and keys <= listed, keys - listed
        assert ("chunks" in keys) == (req.tokenizer is None)
    assert "serve_max_tokens" in section and "distill.teachers" in section


class _Info:
    def __init__(self, peer: str):
        self.peer_id = type("P", (), {"to_base58": lambda _self: peer})()


class _Writer:
    def close(self):
        self.closed = True


def test_stream_admissions_are_kept_apart_by_protocol_not_by_the_handlers_name():
    """The score and the weight streams' handlers are both called `_handle`: each protocol keeps its own slots."""
    guards = StreamGuards(lambda _p: False, max_age_s=60.0, per_peer=1, total=4)
    served: list[str] = []
    gate = asyncio.Event()

    def handler(label):
        async def _handle(info, reader, writer):
            served.append(label)
            await gate.wait()
        return _handle

    score = guards.admitted("/rlswarm/score/1", handler("score"))
    weights = guards.admitted("/rlswarm/weights/2", handler("weights"))

    async def main():
        first = asyncio.ensure_future(score(_Info("p"), None, _Writer()))  # holds the peer's one score slot
        await asyncio.sleep(0)
        second = asyncio.ensure_future(weights(_Info("p"), None, _Writer()))  # another protocol: a slot of its own
        refused = asyncio.ensure_future(score(_Info("p"), None, _Writer()))  # a second score stream: refused
        await asyncio.sleep(0.01)
        gate.set()
        await asyncio.gather(first, second, refused)

    asyncio.run(main())
    assert sorted(served) == ["score", "weights"]
    assert guards.refused() == {"/rlswarm/score/1:per_peer": 1}
