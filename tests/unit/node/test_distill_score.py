"""A teacher's scoring of a requester's tokens (node/distill/score.py) and the score messages (protocols/score.py)."""

from __future__ import annotations

import math
import random

import msgpack
import numpy as np
import pytest
import torch
import zstandard

from node.distill.score import ScoreRefused, pieces_of_token_bytes, score_for_requester
from node.round.align import sender_token_bytes
from protocols.codec import RecordError
from protocols.score import (
    MIN_LOGPROB,
    ScoreCaps,
    ScoreCompletion,
    ScoreRequest,
    ScoreResponse,
    decode_score_request,
    decode_score_response,
    encode_score_request,
    encode_score_response,
    score_digest,
)

PROMPT = "User: spell it backwards: planet\n\nAssistant:"
TEXTS = ["<answer>tenalp</answer>", " hello wörld, 12 + 30 = 42", "ab"]


def _own_logprobs(loaded, prompt: str, ids: list[int], temperature: float = 1.0) -> list[float]:
    """The teacher's own log-probabilities of `ids` after `prompt`: one plain forward over the full logits."""
    tok, model = loaded.tokenizer, loaded.model
    p = tok(prompt, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([p + ids])).logits[0].float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return [float(logp[len(p) - 1 + t, i]) for t, i in enumerate(ids)]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_same_tokenizer_scores_are_the_teachers_own_logprobs(tiny_qwen, temperature):
    tok = tiny_qwen.tokenizer
    rng = random.Random(0)
    pieces = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in TEXTS]
    pieces.append([rng.randrange(tiny_qwen.vocab_size) for _ in range(17)])  # ids need not be canonical
    texts = [*TEXTS, tok.decode(pieces[-1], skip_special_tokens=True)]
    got = score_for_requester(tiny_qwen.model, tok, PROMPT, texts, pieces, same_tokenizer=True,
                              max_tokens=4096, temperature=temperature)
    for ids, lps in zip(pieces, got):
        assert len(lps) == len(ids)
        assert np.allclose(lps, _own_logprobs(tiny_qwen, PROMPT, ids, temperature), atol=1e-4, rtol=0)


def test_across_tokenizers_each_chunk_sums_to_the_teachers_chunk_logprob(tiny_qwen, tiny_llama):
    teacher, requester = tiny_qwen, tiny_llama
    rt, tt = requester.tokenizer, teacher.tokenizer
    multi_token_chunks = 0
    for text in TEXTS:
        r_ids = rt(text, add_special_tokens=False)["input_ids"] + [rt.eos_token_id]
        pieces = pieces_of_token_bytes(text, sender_token_bytes(rt, text, r_ids))
        assert pieces is not None and pieces[-1] == "" and "".join(pieces) == text
        [got] = score_for_requester(teacher.model, tt, PROMPT, [text], [pieces], same_tokenizer=False, max_tokens=4096,
                                     split="canonical")
        assert len(got) == len(r_ids)
        # the reference: the teacher's own tokens, scored by a plain forward, summed between the shared byte ends
        t_ids = tt(text, add_special_tokens=False)["input_ids"]
        t_lps = _own_logprobs(teacher, PROMPT, t_ids)
        t_ends = np.cumsum(sender_token_bytes(tt, text, t_ids)).tolist()
        r_ends = np.cumsum([len(p.encode()) for p in pieces]).tolist()
        common = sorted(set(t_ends) & set(r_ends) - {0})
        assert common[-1] == len(text.encode())
        lo_t = lo_r = 0
        for end in common:
            hi_t = max(i for i, e in enumerate(t_ends) if e <= end) + 1
            hi_r = max(i for i, e in enumerate(r_ends) if e <= end) + 1
            assert math.isclose(sum(got[lo_r:hi_r]), sum(t_lps[lo_t:hi_t]), abs_tol=1e-4)
            multi_token_chunks += (hi_t - lo_t > 1) or (hi_r - lo_r > 1)
            lo_t, lo_r = hi_t, hi_r
        assert math.isclose(sum(got), sum(t_lps), abs_tol=1e-4)  # the whole text's log-probability
    assert multi_token_chunks > 0  # the two tokenizations really differ somewhere


def test_the_requester_split_scores_a_non_canonical_split_as_the_id_path_does(tiny_qwen):
    """One tokenizer, a sampled split that is not the tokenizer's own (one token per character): on the byte path
    `requester` scores exactly the requester's tokens, as the id path does; `canonical` scores another event (the
    whole text tokenized as the teacher would), so its values differ."""
    tok = tiny_qwen.tokenizer
    text = "<answer>tenalp</answer>"
    ids = [tok(ch, add_special_tokens=False)["input_ids"][0] for ch in text]
    assert len(ids) == len(text) > len(tok(text, add_special_tokens=False)["input_ids"])  # really non-canonical
    assert tok.decode(ids) == text
    pieces = pieces_of_token_bytes(text, sender_token_bytes(tok, text, ids))
    [by_id] = score_for_requester(tiny_qwen.model, tok, PROMPT, [text], [ids], same_tokenizer=True, max_tokens=4096)
    [split] = score_for_requester(tiny_qwen.model, tok, PROMPT, [text], [pieces], same_tokenizer=False,
                                  max_tokens=4096, split="requester")
    [canon] = score_for_requester(tiny_qwen.model, tok, PROMPT, [text], [pieces], same_tokenizer=False,
                                  max_tokens=4096, split="canonical")
    assert np.allclose(split, by_id, atol=1e-4, rtol=0)
    assert len(canon) == len(ids) and not np.allclose(canon, by_id, atol=1e-2)


def test_an_unalignable_completion_gets_no_scores(tiny_qwen):
    got = score_for_requester(tiny_qwen.model, tiny_qwen.tokenizer, PROMPT, ["", "ab"], [[""], ["a", "b"]],
                              same_tokenizer=False, max_tokens=4096)
    assert got[0] is None and len(got[1]) == 2


def test_refusals_come_before_any_forward_pass(tiny_qwen):
    tok, model = tiny_qwen.tokenizer, tiny_qwen.model
    calls = []
    handle = model.get_input_embeddings().register_forward_pre_hook(lambda *_: calls.append(1))  # any forward
    try:
        ids = tok(TEXTS[0], add_special_tokens=False)["input_ids"]
        n_prompt = len(tok(PROMPT, add_special_tokens=False)["input_ids"])
        cases = [  # (texts, pieces, same_tokenizer, max_tokens, reason)
            ([TEXTS[0]] * 4, [ids] * 4, True, 4 * (n_prompt + len(ids)) - 1, "over_budget"),
            (["x" * 10_000], [["x" * 10_000]], False, 10, "over_budget"),  # characters, before tokenizing
            ([TEXTS[0]], [["<answer>", "tenalp"]], False, 4096, "pieces_mismatch"),
            ([TEXTS[0]], [[tiny_qwen.vocab_size]], True, 4096, "bad_token_id"),
            ([TEXTS[0]], [[]], True, 4096, "bad_token_id"),
            ([], [], True, 4096, "empty"),
            ([TEXTS[0], TEXTS[1]], [ids], True, 4096, "pieces_mismatch"),
        ]
        for texts, pieces, same, budget, reason in cases:
            with pytest.raises(ScoreRefused) as exc:
                score_for_requester(model, tok, PROMPT, texts, pieces, same_tokenizer=same, max_tokens=budget)
            assert exc.value.reason == reason, (texts, reason)
        assert calls == []
        score_for_requester(model, tok, PROMPT, [TEXTS[0]] * 4, [ids] * 4, same_tokenizer=True,
                            max_tokens=4 * (n_prompt + len(ids)))  # exactly the budget is allowed
        assert calls
    finally:
        handle.remove()


# ---------------------------------------------------------------- the messages

FP = "ab" * 32


def _request(**kw) -> ScoreRequest:
    base = {"swarm": "s", "prompt": PROMPT, "completions": (
        ScoreCompletion("abc", token_ids=(1, 2, 3)), ScoreCompletion("héllo", token_bytes=(1, 2, 3, 0))),
        "temperature": 0.7, "tokenizer": FP, "vocab_size": 512}
    return ScoreRequest(**{**base, **kw})


def _raw(obj) -> bytes:
    return zstandard.ZstdCompressor().compress(msgpack.packb(obj, use_bin_type=True))


def _wire(req: ScoreRequest) -> dict:
    return msgpack.unpackb(zstandard.ZstdDecompressor().decompress(encode_score_request(req)), raw=False)


def test_request_and_response_round_trip():
    req = _request()
    data = encode_score_request(req)
    assert decode_score_request(data) == req
    bytes_only = _request(completions=(ScoreCompletion("héllo", token_bytes=(1, 2, 3, 0)),), tokenizer=None,
                          vocab_size=None)
    assert decode_score_request(encode_score_request(bytes_only)) == bytes_only
    lps = ((-0.5, -1.25, -3.0), ())  # the second completion: not aligned
    for dtype in ("f32", "f16"):
        resp = decode_score_response(encode_score_response(ScoreResponse(score_digest(data), lps), logprob_dtype=dtype),
                                     req, score_digest(data))
        assert resp.logprobs == lps and resp.request == score_digest(data)
    clamped = ScoreResponse(score_digest(data), ((-1e6, 0.0, -1.0), (-1.0,) * 4))
    got = decode_score_response(encode_score_response(clamped), req, score_digest(data))
    assert got.logprobs[0][0] == MIN_LOGPROB


def test_bad_requests_are_refused_with_their_reason():
    good = _wire(_request())
    ids_comp, bytes_comp = good["completions"]

    def with_(**kw):
        return _raw({**good, **kw})

    cases = {
        "version": [with_(v=2)],
        "schema": [with_(extra=1), _raw({k: v for k, v in good.items() if k != "swarm"}), with_(temperature=0.0),
                   with_(temperature="hot"), with_(completions=[]), with_(tokenizer="x"),
                   with_(completions=[{**bytes_comp, "token_ids": ids_comp["token_ids"]}]),
                   with_(completions=[{**ids_comp, "more": 1}]), with_(completions=[1]),
                   with_(completions=[{**bytes_comp, "token_bytes": b"\x01\x00"}]),  # bytes do not add up
                   with_(completions=[{**ids_comp, "token_ids": b"\x01"}]),  # half an id
                   _raw({k: v for k, v in good.items() if k not in ("tokenizer", "vocab_size")})],  # ids, no fingerprint
        "too_many_completions": [with_(completions=[bytes_comp] * 65)],
        "too_many_tokens": [with_(completions=[{"text": "a" * 9000, "token_bytes": b"\x01\x00" * 9000}] * 2)],
        "too_long": [with_(prompt="p" * ((1 << 16) + 1))],
        "token_out_of_vocab": [with_(vocab_size=3)],
        "too_large": [b"\x00" * ((1 << 20) + 1), with_(completions=[bytes_comp] * 70)],
        "zstd": [b"not zstd", with_()[:-3], with_() + b"x"],
        "msgpack": [zstandard.ZstdCompressor().compress(b"\xc1")],
    }
    for reason, payloads in cases.items():
        for data in payloads:
            with pytest.raises(RecordError) as exc:
                decode_score_request(data)
            assert exc.value.reason == reason, (reason, exc.value)
    with pytest.raises(RecordError, match="too_many_completions"):
        decode_score_request(encode_score_request(_request()), ScoreCaps(max_completions=1))


def test_bad_responses_are_refused_with_their_reason():
    req, data = _request(), encode_score_request(_request())
    digest = score_digest(data)
    good = {"v": 1, "request": digest, "lp": "f32",
            "logprobs": [np.array([-0.5, -1.0, -2.0], "<f4").tobytes(), b""]}

    def f32(*values) -> bytes:
        return np.array(values, "<f4").tobytes()

    cases = {
        "wrong_request": [{**good, "request": score_digest(data + b"x")}],
        "length_mismatch": [{**good, "logprobs": good["logprobs"][:1]},
                            {**good, "logprobs": [f32(-1.0, -1.0), b""]},
                            {**good, "logprobs": [*good["logprobs"], b""]}],
        "bad_logprob": [{**good, "logprobs": [f32(-1.0, float("nan"), -1.0), b""]},
                        {**good, "logprobs": [f32(-1.0, 0.5, -1.0), b""]},
                        {**good, "logprobs": [f32(-1.0, -1e5, -1.0), b""]},
                        {**good, "logprobs": [f32(-1.0, float("-inf"), -1.0), b""]}],
        "version": [{**good, "v": 0}],
        "schema": [{**good, "lp": "f64"}, {**good, "extra": 1}, {k: v for k, v in good.items() if k != "lp"},
                   {**good, "logprobs": [[-1.0, -1.0, -1.0], b""]}],
    }
    assert decode_score_response(_raw(good), req, digest).logprobs[0] == (-0.5, -1.0, -2.0)
    for reason, objs in cases.items():
        for obj in objs:
            with pytest.raises(RecordError) as exc:
                decode_score_response(_raw(obj), req, digest)
            assert exc.value.reason == reason, (reason, obj)
    with pytest.raises(ValueError):
        encode_score_response(ScoreResponse(digest, ((float("nan"),),)))
    with pytest.raises(ValueError):
        encode_score_request(_request(completions=(ScoreCompletion("a", token_ids=(1,), token_bytes=(1,)),)))


def test_a_request_scored_and_answered_end_to_end(tiny_qwen, tiny_llama):
    """The requester's bytes → the teacher decodes, scores, answers → the requester decodes its scores."""
    rt, tt = tiny_llama.tokenizer, tiny_qwen.tokenizer
    comps = []
    for text in TEXTS:
        ids = rt(text, add_special_tokens=False)["input_ids"] + [rt.eos_token_id]
        comps.append(ScoreCompletion(text, token_bytes=sender_token_bytes(rt, text, ids)))
    data = encode_score_request(ScoreRequest("s", PROMPT, tuple(comps)))
    req = decode_score_request(data)  # the teacher's side
    pieces = [pieces_of_token_bytes(c.text, c.token_bytes) for c in req.completions]
    scores = score_for_requester(tiny_qwen.model, tt, req.prompt, [c.text for c in req.completions], pieces,
                                 same_tokenizer=False, max_tokens=4096, temperature=req.temperature)
    answer = encode_score_response(ScoreResponse(score_digest(data), tuple(tuple(s or ()) for s in scores)))
    got = decode_score_response(answer, req, score_digest(data))  # the requester's side
    assert [len(x) for x in got.logprobs] == [c.n_tokens for c in comps]
    assert all(np.allclose(a, b, atol=1e-5) for a, b in zip(got.logprobs, scores))


def test_token_ids_travel_when_the_fingerprints_match(tiny_qwen):
    tok = tiny_qwen.tokenizer
    ids = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in TEXTS]
    data = encode_score_request(ScoreRequest("s", PROMPT, tuple(ScoreCompletion(t, token_ids=tuple(i))
                                                               for t, i in zip(TEXTS, ids)),
                                             tokenizer=tiny_qwen.fingerprint, vocab_size=tiny_qwen.vocab_size))
    req = decode_score_request(data)
    assert req.tokenizer == tiny_qwen.fingerprint  # the teacher's own: it scores the ids as they are
    scores = score_for_requester(tiny_qwen.model, tok, req.prompt, [c.text for c in req.completions],
                                 [c.token_ids for c in req.completions], same_tokenizer=True, max_tokens=4096)
    got = decode_score_response(encode_score_response(ScoreResponse(score_digest(data), tuple(map(tuple, scores))),
                                                      logprob_dtype="f16"), req, score_digest(data))
    for i, lps in zip(ids, got.logprobs):
        assert np.allclose(lps, _own_logprobs(tiny_qwen, PROMPT, i), atol=2e-2)  # float16 on the wire
