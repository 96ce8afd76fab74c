"""A score request and its response: a student asks a teacher for log π_teacher of its own tokens
(docs/PROTOCOL.md §11; the stream is swarm.exchange.score_stream).

    request  = zstd(msgpack({"v": 1, "swarm", "prompt", "temperature", "completions": [c, ...]
                             [, "tokenizer", "vocab_size"]}))
    c        = {"text", "token_ids"} or {"text", "token_bytes"}
    response = zstd(msgpack({"v": 1, "request", "lp", "logprobs": [bin, ...] [, "chunks": [bin, ...]]}))

A completion carries the requester's token ids (packed like a record's, docs/PROTOCOL.md §2; then the
request names the requester's tokenizer fingerprint and vocab size) or, for a teacher of another
tokenizer, how many UTF-8 bytes of `text` each requester token produced (`token_bytes`, as in a
record): the byte lengths of the requester's decoded token strings, from which the teacher cuts
those strings back out of the text (node.distill.score.pieces_of_token_bytes). A request may mix the two;
`tokenizer` and `vocab_size` are there exactly when some completion carries ids (else `schema`). The response names
the request by the sha256 of its bytes and holds, per completion in order, one log-probability per
requester token, or an empty array when the teacher could not align that completion, and, when some
completion went the byte path, `chunks`: per completion the requester tokens in each chunk of text both
tokenizations end at (empty for one token a chunk; a non-empty entry for a completion sent as ids is
`wrong_request`).

Both messages are decoded under caps checked before the work they guard (ScoreCaps: compressed and
decompressed bytes, completions, tokens of the whole request, characters per string), with the
record codec's framing and parser (protocols.codec: one zstd frame, msgpack without ext types,
objects counted while parsing). Maps are exact: a missing or unknown key is `schema`. Drop reasons
are those of records (docs/PROTOCOL.md §8.1) plus `wrong_request`, a response naming another
request (or, by its chunks, answering another kind of request).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from protocols.codec import (
    _SHA256_HEX,
    Caps,
    RecordError,
    _compress,
    _decompress,
    _get,
    _id_dtype,
    _unpack,
    sha256_hex,
)

SCORE_VERSION = 1
MIN_LOGPROB = -1e4  # a teacher's log-probability below this per token is absurd (bad_logprob); encoders clamp
_LOGPROB_SLACK = 1e-3  # f16 rounding of values near 0 may land slightly above 0
_REQUEST_KEYS = {"v", "swarm", "prompt", "temperature", "completions"}
_ID_KEYS = {"tokenizer", "vocab_size"}


@dataclass(frozen=True)
class ScoreCaps:
    """What a teacher decodes at most, all checked before the memory or work they guard."""

    max_bytes: int = 1 << 20  # compressed message
    max_decompressed_bytes: int = 4 << 20
    max_completions: int = 64
    max_tokens: int = 16384  # requester tokens of the whole request (ids or byte counts), before unpacking
    max_text_chars: int = 1 << 16  # the prompt and each completion text

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_decompressed_bytes", "max_completions", "max_tokens", "max_text_chars"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ScoreCaps.{name} must be a positive int, got {value!r}")

    def codec_caps(self) -> Caps:
        """The record codec's caps that bound one message of these caps while it is parsed."""
        return Caps(max_compressed_bytes=self.max_bytes, max_decompressed_bytes=self.max_decompressed_bytes,
                    max_records=1, max_completions=self.max_completions, max_tokens=self.max_tokens,
                    max_text_chars=self.max_text_chars, max_bundle_tokens=self.max_tokens)


DEFAULT_SCORE_CAPS = ScoreCaps()


@dataclass(frozen=True)
class ScoreCompletion:
    """One of the requester's own completions: its text and its tokens, as ids or as bytes per token."""

    text: str
    token_ids: tuple[int, ...] | None = None  # the requester's ids (the request names its tokenizer)
    token_bytes: tuple[int, ...] | None = None  # UTF-8 bytes of `text` per requester token (Σ = its length)

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids if self.token_ids is not None else self.token_bytes or ())


@dataclass(frozen=True)
class ScoreRequest:
    swarm: str  # the swarm both peers are in
    prompt: str  # the requester's rendered prompt
    completions: tuple[ScoreCompletion, ...]  # 1..max_completions
    temperature: float = 1.0  # the teacher scores log_softmax(logits / temperature)
    tokenizer: str | None = None  # the requester's tokenizer fingerprint (sha256 hex): with token ids only
    vocab_size: int | None = None  # bounds the requester's ids: with token ids only
    v: int = SCORE_VERSION


@dataclass(frozen=True)
class ScoreResponse:
    request: str  # sha256 hex of the request's bytes
    logprobs: tuple[tuple[float, ...], ...]  # per completion: one value per requester token, or () (not aligned)
    # per completion: requester tokens in each chunk of text both tokenizations end at (Σ = its tokens), or ()
    # for one token per chunk (the same tokenizer); None: () for every completion
    chunks: tuple[tuple[int, ...], ...] | None = None
    v: int = SCORE_VERSION


def score_digest(request_bytes: bytes) -> str:
    """What a response names its request by: the sha256 hex of the request's bytes."""
    return sha256_hex(request_bytes)


# ---------------------------------------------------------------- encode (our own messages: ValueError)

def encode_score_request(req: ScoreRequest) -> bytes:
    """The request's bytes; ValueError for a request no teacher would accept."""
    with_ids = [c.token_ids is not None for c in req.completions]
    if not req.completions or any((c.token_ids is None) == (c.token_bytes is None) for c in req.completions):
        raise ValueError("every completion carries exactly one of token_ids and token_bytes")
    if any(with_ids) and (req.tokenizer is None or req.vocab_size is None):
        raise ValueError("token ids need the requester's tokenizer fingerprint and vocab size")
    if not (math.isfinite(req.temperature) and req.temperature > 0):
        raise ValueError("temperature must be finite and > 0")
    comps = []
    for c in req.completions:
        if c.token_ids is not None:
            ids = np.asarray(c.token_ids, dtype=np.int64)
            if ids.size == 0 or int(ids.min()) < 0 or int(ids.max()) >= req.vocab_size:
                raise ValueError(f"token ids must be 1 or more ids in [0, {req.vocab_size})")
            comps.append({"text": c.text, "token_ids": ids.astype(_id_dtype(req.vocab_size)).tobytes()})
        else:
            nb = np.asarray(c.token_bytes, dtype=np.int64)
            if nb.size == 0 or int(nb.min()) < 0 or int(nb.max()) > 0xFFFF or int(nb.sum()) != len(c.text.encode()):
                raise ValueError("token_bytes must give each token's bytes of text (0..65535, summing to its length)")
            comps.append({"text": c.text, "token_bytes": nb.astype("<u2").tobytes()})
    d = {"v": req.v, "swarm": req.swarm, "prompt": req.prompt, "temperature": float(req.temperature),
         "completions": comps}
    if req.tokenizer is not None:
        d |= {"tokenizer": req.tokenizer, "vocab_size": req.vocab_size}
    return _compress(d)


def encode_score_response(resp: ScoreResponse, *, logprob_dtype: str = "f32") -> bytes:
    """The response's bytes; values below MIN_LOGPROB are clamped to it, non-finite or positive ones refused."""
    if logprob_dtype not in ("f16", "f32"):
        raise ValueError(f"logprob_dtype must be 'f16' or 'f32', got {logprob_dtype!r}")
    arrays, chunks = [], []
    for lps, ch in zip(resp.logprobs, resp.chunks or [()] * len(resp.logprobs)):
        n = np.asarray(ch, dtype=np.int64)
        if n.size and (not lps or int(n.min()) < 1 or int(n.max()) > 0xFFFF or int(n.sum()) != len(lps)):
            raise ValueError("chunk lengths are 1..65535 tokens each and add up to the completion's values")
        chunks.append(n.astype("<u2").tobytes())
        a = np.asarray(lps, dtype=np.float64)
        if not np.all(np.isfinite(a)) or (a.size and float(a.max()) > 0):
            raise ValueError("a teacher's log-probabilities are finite and <= 0")
        arrays.append(np.maximum(a, MIN_LOGPROB).astype("<f2" if logprob_dtype == "f16" else "<f4").tobytes())
    d = {"v": resp.v, "request": resp.request, "lp": logprob_dtype, "logprobs": arrays}
    if any(chunks):
        d["chunks"] = chunks
    return _compress(d)


# ---------------------------------------------------------------- decode (untrusted bytes: RecordError)

def _exact(d: object, required: set[str], optional: set[str], where: str) -> None:
    if not isinstance(d, dict):
        raise RecordError("schema", f"{where} is not a map")
    keys = set(d)
    if not required <= keys or not keys <= required | optional:
        raise RecordError("schema", f"{where} keys are not exactly {sorted(required)} (+ {sorted(optional)})")


def _version(d: object, where: str) -> None:
    v = _get(d, "v", int, where)
    if v != SCORE_VERSION:
        raise RecordError("version", f"{where} v{v}, this node speaks v{SCORE_VERSION}")


def _text(d: dict, key: str, where: str, caps: ScoreCaps) -> str:
    value = _get(d, key, str, where)
    if len(value) > caps.max_text_chars:
        raise RecordError("too_long", f"{where}.{key} has {len(value)} > {caps.max_text_chars} characters")
    return value


def decode_score_request(data: bytes, caps: ScoreCaps = DEFAULT_SCORE_CAPS) -> ScoreRequest:
    """Validate a request's bytes into a ScoreRequest, or raise RecordError(reason)."""
    d = _unpack(_decompress(data, caps.codec_caps()), caps.codec_caps())
    _version(d, "request")
    with_ids = isinstance(d, dict) and bool(_ID_KEYS & set(d))
    _exact(d, _REQUEST_KEYS | (_ID_KEYS if with_ids else set()), set(), "request")
    raw = _get(d, "completions", list, "request")
    if len(raw) > caps.max_completions:
        raise RecordError("too_many_completions", f"{len(raw)} > {caps.max_completions}")
    if not raw:
        raise RecordError("schema", "request has no completions")
    temperature = _get(d, "temperature", float, "request")
    if temperature <= 0:
        raise RecordError("schema", "temperature must be > 0")
    tokenizer = vocab = None
    if with_ids:
        tokenizer, vocab = _get(d, "tokenizer", str, "request"), _get(d, "vocab_size", int, "request")
        if len(tokenizer) != 64 or not set(tokenizer) <= _SHA256_HEX or not 0 < vocab <= 1 << 24:
            raise RecordError("schema", "tokenizer fingerprint or vocab_size out of range")
    sizes = []  # (key, packed bytes) of each completion, every length checked before anything is unpacked
    for c in raw:
        key = "token_ids" if isinstance(c, dict) and "token_ids" in c else "token_bytes"
        _exact(c, {"text", key}, set(), "completion")
        if key == "token_ids" and not with_ids:
            raise RecordError("schema", "token ids without the requester's tokenizer and vocab_size")
        packed = _get(c, key, bytes, "completion")
        item = np.dtype(_id_dtype(vocab) if key == "token_ids" else "<u2").itemsize
        if len(packed) % item or not packed:
            raise RecordError("schema", f"{key} is empty or not a whole number of items")
        sizes.append((key, packed, item))
    if sum(len(p) // item for _, p, item in sizes) > caps.max_tokens:
        raise RecordError("too_many_tokens", f"more than {caps.max_tokens} tokens in the request")
    completions = []
    for c, (key, packed, _) in zip(raw, sizes):
        text = _text(c, "text", "completion", caps)
        if key == "token_ids":
            ids = np.frombuffer(packed, dtype=_id_dtype(vocab))
            if int(ids.max()) >= vocab:
                raise RecordError("token_out_of_vocab", f"id {int(ids.max())} >= vocab_size {vocab}")
            completions.append(ScoreCompletion(text, token_ids=tuple(ids.tolist())))
        else:
            nb = np.frombuffer(packed, dtype="<u2")
            if int(nb.sum(dtype=np.int64)) != len(text.encode("utf-8")):
                raise RecordError("schema", "token_bytes do not add up to the text's UTF-8 length")
            completions.append(ScoreCompletion(text, token_bytes=tuple(nb.tolist())))
    if with_ids and all(c.token_ids is None for c in completions):
        raise RecordError("schema", "tokenizer and vocab_size in a request without token ids")
    return ScoreRequest(swarm=_get(d, "swarm", str, "request"), prompt=_text(d, "prompt", "request", caps),
                        completions=tuple(completions), temperature=temperature, tokenizer=tokenizer,
                        vocab_size=vocab)


def decode_score_response(data: bytes, request: ScoreRequest, request_sha256: str,
                          caps: ScoreCaps = DEFAULT_SCORE_CAPS) -> ScoreResponse:
    """Validate a teacher's answer to `request` (whose bytes had digest `request_sha256`), or raise
    RecordError(reason): another request's answer (`wrong_request`), a count or length that is not the
    request's (`length_mismatch`), a NaN, positive or absurd value (`bad_logprob`)."""
    d = _unpack(_decompress(data, caps.codec_caps()), caps.codec_caps())
    _version(d, "response")
    _exact(d, {"v", "request", "lp", "logprobs"}, {"chunks"}, "response")
    if _get(d, "request", str, "response") != request_sha256:
        raise RecordError("wrong_request", "the response names another request")
    lp = _get(d, "lp", str, "response")
    if lp not in ("f16", "f32"):
        raise RecordError("schema", f"logprob dtype {lp[:8]!r}")
    raw = _get(d, "logprobs", list, "response")
    if len(raw) != len(request.completions):
        raise RecordError("length_mismatch", f"{len(raw)} arrays for {len(request.completions)} completions")
    dtype = np.dtype("<f2" if lp == "f16" else "<f4")
    out = []
    for packed, c in zip(raw, request.completions):
        if not isinstance(packed, bytes):
            raise RecordError("schema", "a logprobs entry is not bin")
        if len(packed) not in (0, c.n_tokens * dtype.itemsize):
            raise RecordError("length_mismatch", "a logprobs array is neither empty nor one value per token")
        a = np.frombuffer(packed, dtype=dtype).astype(np.float64)
        if a.size and (not np.all(np.isfinite(a)) or float(a.max()) > _LOGPROB_SLACK or float(a.min()) < MIN_LOGPROB):
            raise RecordError("bad_logprob", f"log-probabilities must be finite, <= 0 and >= {MIN_LOGPROB:g}")
        out.append(tuple(np.minimum(a, 0.0).tolist()))
    return ScoreResponse(request=request_sha256, logprobs=tuple(out), chunks=_chunks(d, out, request))


def _chunks(d: dict, values: list[tuple[float, ...]], request: ScoreRequest) -> tuple[tuple[int, ...], ...] | None:
    """The response's chunk lengths, each array empty or ≥ 1 per chunk adding up to its completion's values; empty
    for every completion the request sent as token ids (one token a chunk: else `wrong_request`, the answer to a
    byte-path request, whose chunks would sum the gap of many tokens onto each)."""
    if "chunks" not in d:
        return None
    raw = _get(d, "chunks", list, "response")
    if len(raw) != len(values):
        raise RecordError("length_mismatch", f"{len(raw)} chunk arrays for {len(values)} completions")
    out = []
    for packed, lps in zip(raw, values):
        if not isinstance(packed, bytes) or len(packed) % 2:
            raise RecordError("schema", "a chunks entry is not bin of uint16")
        n = np.frombuffer(packed, dtype="<u2").astype(np.int64)
        if n.size and (not lps or int(n.min()) < 1 or int(n.sum()) != len(lps)):
            raise RecordError("length_mismatch", "chunk lengths do not add up to the completion's values")
        out.append(tuple(n.tolist()))
    if any(n and c.token_ids is not None for n, c in zip(out, request.completions)):
        raise RecordError("wrong_request", "chunks for a completion sent as token ids")
    return tuple(out)
