"""Wire codec (protocols.codec): round trips of every field, malformed input for every field, caps.

Malformed records are built by editing the msgpack-ready map of a valid record and packing it by
hand (`_bundle`), so each test breaks exactly one field the way a hostile or buggy peer would.
"""

from __future__ import annotations

import math
import struct
import tracemalloc
from collections import Counter
from dataclasses import asdict, replace

import msgpack
import numpy as np
import pytest
import zstandard

from protocols.announce import decode_announcement, encode_announcement
from protocols.codec import (
    DEFAULT_CAPS,
    Caps,
    RecordError,
    decode_bundle,
    decode_record,
    encode_bundle,
    encode_record,
    record_from_wire,
    record_to_wire,
    sha256_hex,
)
from protocols.records import (
    SCHEMA_VERSION,
    Announcement,
    Completion,
    ModelInfo,
    RolloutRecord,
    SamplingInfo,
    TaskRef,
)

FP = "ab" * 32  # a 64-char lowercase hex tokenizer fingerprint


def _record(*, vocab: int = 300, completions: tuple[Completion, ...] | None = None, prompt: str = "Q: 2+3?",
            config: dict | None = None, index: int = 7) -> RolloutRecord:
    if completions is None:
        completions = (
            Completion("<answer>5</answer>", (1, 2, 3), (-0.5, -0.25, -1.0), "stop", reward_claimed=1.0),
            Completion("6", (4, 5), (-2.0, -0.125), "length", reward_claimed=None),
        )
    return RolloutRecord(
        swarm="rlswarm", peer="peerA", round=3, policy_version=2, created_at=1700000000.5,
        model=ModelInfo("tiny-qwen2", FP, vocab), sampling=SamplingInfo(1.0, 0.95, 16),
        task=TaskRef("chain_sum", config if config is not None else {"min_terms": 2}, 0, index),
        prompt=prompt, completions=completions)


def _pack(obj) -> bytes:
    return zstandard.ZstdCompressor().compress(msgpack.packb(obj, use_bin_type=True))


def _bundle(*wires: dict, v: int = SCHEMA_VERSION) -> bytes:
    return _pack({"v": v, "records": list(wires)})


def _decode_one(wire: dict, caps: Caps = DEFAULT_CAPS) -> str | None:
    """Drop reason of a single-record bundle (None when it decodes)."""
    records, drops = decode_bundle(_bundle(wire), caps)
    assert len(records) + sum(drops.values()) == 1
    return next(iter(drops)) if drops else None


# ------------------------------------------------------------------------------- round trips

def test_round_trip_every_field_f32_exact():
    # f32 holds -0.5, -0.25, -1.0, -2.0, -0.125 exactly, so every field must come back equal
    rec = _record(prompt="Résumé: 数学 🙂 ≤ 4", config={"min_terms": 2, "nested": {"a": [1, 2.5, {"b": "c"}]}})
    comps = (replace(rec.completions[0], text="naïve ✓ 答案"), rec.completions[1])
    rec = replace(rec, completions=comps)
    assert decode_record(encode_record(rec, logprob_dtype="f32")) == rec
    records, drops = decode_bundle(encode_bundle([rec, replace(rec, round=4)], logprob_dtype="f32"))
    assert records == [rec, replace(rec, round=4)] and drops == Counter()


def test_round_trip_f16_rounds_to_nearest_half():
    # 0.1 in float16: 0.1 / 2^-4 = 1.6 → mantissa round(0.6 · 1024) = 614 → (1 + 614/1024) · 2^-4
    #                = 0.0999755859375 ; -3.0 and -0.5 are exact
    rec = _record(completions=(Completion("x", (1, 2, 3), (-0.1, -3.0, -0.5), "stop"),))
    got = decode_record(encode_record(rec, logprob_dtype="f16")).completions[0].logprobs
    assert got == (-0.0999755859375, -3.0, -0.5)
    f32 = decode_record(encode_record(rec, logprob_dtype="f32")).completions[0].logprobs
    assert f32[0] == float(np.float32(-0.1)) and f32[0] != -0.1  # f32 is closer but not exact


def test_packed_layout_hand_computed_bytes():
    # ids (1, 258) as <u2: 01 00 | 02 01 ; logprob -1.0 as <f2 = 0xBC00 → 00 BC, as <f4 = 0xBF800000
    rec = _record(completions=(Completion("ab", (1, 258), (-1.0, -1.0), "stop"),))
    wire = record_to_wire(rec)["completions"][0]
    assert wire["token_ids"] == b"\x01\x00\x02\x01"
    assert wire["logprobs"] == b"\x00\xbc\x00\xbc"
    assert record_to_wire(rec, logprob_dtype="f32")["completions"][0]["logprobs"] == b"\x00\x00\x80\xbf" * 2
    # msgpack bin8 framing: 1 type byte + 1 length byte + 4 payload bytes
    assert len(msgpack.packb(wire["token_ids"], use_bin_type=True)) == 6


@pytest.mark.parametrize("vocab, top_id, id_bytes", [(65536, 65535, 2), (65537, 65536, 4)])
def test_token_ids_uint16_up_to_vocab_65536_then_uint32(vocab, top_id, id_bytes):
    # vocab 65536 → ids 0..65535 fit uint16 (2 B each); vocab 65537 → id 65536 needs uint32 (4 B)
    rec = _record(vocab=vocab, completions=(Completion("t", (0, top_id, 17), (-1.0, -2.0, -0.5), "length"),))
    wire = record_to_wire(rec)
    assert len(wire["completions"][0]["token_ids"]) == 3 * id_bytes
    assert record_from_wire(msgpack.unpackb(msgpack.packb(wire, use_bin_type=True), raw=False)) == rec
    assert decode_record(encode_record(rec)) == rec


def test_reward_claimed_none_float_and_int_come_back_as_float_or_none():
    comps = (Completion("a", (1,), (-1.0,), "stop", None), Completion("b", (2,), (-1.0,), "stop", 0.75))
    got = decode_record(encode_record(_record(completions=comps))).completions
    assert got[0].reward_claimed is None and got[1].reward_claimed == 0.75
    wire = record_to_wire(_record(completions=comps))
    wire["completions"][1]["reward_claimed"] = 1  # an integer reward is a number too
    assert record_from_wire(wire).completions[1].reward_claimed == 1.0


def test_small_positive_logprob_from_f16_rounding_is_clamped_to_zero():
    wire = record_to_wire(_record())
    wire["completions"][0]["logprobs"] = np.array([1e-4, -1.0, -1.0], "<f2").tobytes()  # ≤ 1e-3 slack
    assert _decode_one(wire) is None
    assert record_from_wire(wire).completions[0].logprobs[0] == 0.0


def test_f16_encoding_clamps_below_float16_range_instead_of_minus_inf():
    rec = _record(completions=(Completion("x", (1, 2), (-1e5, -1.0), "stop"),))
    assert decode_record(encode_record(rec)).completions[0].logprobs == (-65504.0, -1.0)
    assert decode_record(encode_record(rec, logprob_dtype="f32")).completions[0].logprobs == (-1e5, -1.0)


@pytest.mark.parametrize("bad, message", [
    (Completion("x", (1, 300), (-1.0, -1.0), "stop"), "token id"),  # 300 ≥ vocab 300
    (Completion("x", (-1,), (-1.0,), "stop"), "token id"),
    (Completion("x", (1, 2), (-1.0,), "stop"), "2 token ids but 1 logprobs"),
    (Completion("x", (1,), (math.nan,), "stop"), "non-finite"),
])
def test_encoder_refuses_what_receivers_would_drop(bad, message):
    with pytest.raises(ValueError, match=message):
        encode_bundle([_record(completions=(bad,))])


def test_encoder_refuses_unknown_logprob_dtype():
    with pytest.raises(ValueError, match="logprob_dtype"):
        record_to_wire(_record(), logprob_dtype="bf16")


# ------------------------------------------------------------------- malformed, one field each

RECORD_KEYS = ["v", "swarm", "peer", "round", "policy_version", "created_at", "model", "sampling", "task",
               "prompt", "lp", "completions"]
NESTED_KEYS = [("model", k) for k in ("name", "tokenizer", "vocab_size")] + \
              [("sampling", k) for k in ("temperature", "top_p", "max_new_tokens")] + \
              [("task", k) for k in ("dataset", "config", "seed", "index")]
COMPLETION_KEYS = ["text", "token_ids", "logprobs", "finish_reason"]


@pytest.mark.parametrize("key", RECORD_KEYS)
def test_missing_record_key_is_schema(key):
    wire = record_to_wire(_record())
    del wire[key]
    assert _decode_one(wire) == "schema"


@pytest.mark.parametrize("outer, key", NESTED_KEYS)
def test_missing_nested_key_is_schema(outer, key):
    wire = record_to_wire(_record())
    del wire[outer][key]
    assert _decode_one(wire) == "schema"


@pytest.mark.parametrize("key", COMPLETION_KEYS)
def test_missing_completion_key_is_schema(key):
    wire = record_to_wire(_record())
    del wire["completions"][1][key]
    assert _decode_one(wire) == "schema"


def test_missing_reward_claimed_means_none():
    wire = record_to_wire(_record())
    del wire["completions"][0]["reward_claimed"]
    assert record_from_wire(wire).completions[0].reward_claimed is None


def _set(path: str, value):
    def edit(wire):
        *outer, last = path.split(".")
        d = wire
        for k in outer:
            d = d[int(k)] if isinstance(d, list) else d[k]
        d[int(last) if isinstance(d, list) else last] = value
    return edit


def _lps(*values, dtype="<f2"):
    return _set("completions.0.logprobs", np.array(values, dtype).tobytes())


MALFORMED = {
    # wrong types
    "round as str": (_set("round", "3"), "schema"),
    "round as bool": (_set("round", True), "schema"),
    "round as float": (_set("round", 3.0), "schema"),
    "created_at as str": (_set("created_at", "now"), "schema"),
    "peer as int": (_set("peer", 5), "schema"),
    "prompt as bytes": (_set("prompt", b"Q"), "schema"),
    "vocab_size as float": (_set("model.vocab_size", 300.5), "schema"),
    "task config as list": (_set("task.config", [1, 2]), "schema"),
    "model as list": (_set("model", ["tiny", FP, 300]), "schema"),
    "completions as map": (_set("completions", {"0": 1}), "schema"),
    "completion as list": (_set("completions.0", ["x"]), "schema"),
    "token_ids as list": (_set("completions.0.token_ids", [1, 2, 3]), "schema"),
    "text as bytes": (_set("completions.0.text", b"x"), "schema"),
    "reward_claimed as str": (_set("completions.0.reward_claimed", "1"), "schema"),
    "reward_claimed as bool": (_set("completions.0.reward_claimed", True), "schema"),
    # non-finite numbers
    "created_at NaN": (_set("created_at", math.nan), "schema"),
    "temperature NaN": (_set("sampling.temperature", math.nan), "schema"),
    "top_p inf": (_set("sampling.top_p", math.inf), "schema"),
    "reward_claimed NaN": (_set("completions.0.reward_claimed", math.nan), "schema"),
    "logprob NaN": (_lps(-1.0, math.nan, -1.0), "bad_logprob"),
    "logprob -inf": (_lps(-1.0, -math.inf, -1.0), "bad_logprob"),
    "logprob NaN f32": (lambda w: (_set("lp", "f32")(w), _lps(-1.0, math.nan, -1.0, dtype="<f4")(w),
                                   _set("completions.1.logprobs", np.array([-1, -1], "<f4").tobytes())(w)),
                        "bad_logprob"),
    # values out of range
    "positive logprob": (_lps(-1.0, 0.5, -1.0), "bad_logprob"),
    "id == vocab": (_set("completions.0.token_ids", np.array([1, 300, 2], "<u2").tobytes()), "token_out_of_vocab"),
    "id far above vocab": (_set("completions.0.token_ids", np.array([65535, 1, 2], "<u2").tobytes()),
                           "token_out_of_vocab"),
    "fewer logprobs": (_lps(-1.0, -1.0), "length_mismatch"),
    "odd packed bytes": (_set("completions.0.token_ids", b"\x01\x00\x02"), "schema"),
    "no tokens": (lambda w: (_set("completions.0.token_ids", b"")(w), _lps()(w)), "schema"),
    "no completions": (_set("completions", []), "schema"),
    "finish_reason eos": (_set("completions.0.finish_reason", "eos"), "schema"),
    "fingerprint 63 chars": (_set("model.tokenizer", FP[:63]), "schema"),
    "fingerprint uppercase": (_set("model.tokenizer", FP.upper()), "schema"),
    "fingerprint not hex": (_set("model.tokenizer", "zz" * 32), "schema"),
    "vocab_size 0": (_set("model.vocab_size", 0), "schema"),
    "vocab_size 2^24 + 1": (_set("model.vocab_size", (1 << 24) + 1), "schema"),
    "temperature 0": (_set("sampling.temperature", 0.0), "schema"),
    "top_p 1.5": (_set("sampling.top_p", 1.5), "schema"),
    "max_new_tokens 0": (_set("sampling.max_new_tokens", 0), "schema"),
    "negative round": (_set("round", -1), "schema"),
    "negative policy_version": (_set("policy_version", -2), "schema"),
    "negative task index": (_set("task.index", -1), "schema"),
    "logprob dtype bf16": (_set("lp", "bf16"), "schema"),
    "version 1 (exchange by round)": (_set("v", 1), "version"),
    "version 3": (_set("v", 3), "version"),
    "version 0": (_set("v", 0), "version"),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_field_is_dropped_with_its_reason(name):
    edit, reason = MALFORMED[name]
    wire = record_to_wire(_record())
    edit(wire)
    with pytest.raises(RecordError) as exc:
        record_from_wire(wire)
    assert exc.value.reason == reason
    assert _decode_one(wire) == reason  # and through bytes, as a counted drop


def test_record_that_is_not_a_map_is_schema():
    records, drops = decode_bundle(_bundle(record_to_wire(_record()), [1, 2], "x", None))
    assert len(records) == 1 and drops == Counter({"schema": 3})


def test_bad_records_are_dropped_and_counted_while_good_ones_survive():
    good = [_record(index=i) for i in range(3)]
    bad_version = _set("v", 9)
    wires = [record_to_wire(r) for r in good]
    broken = [record_to_wire(_record(index=10 + i)) for i in range(3)]
    bad_version(broken[0])
    _lps(-1.0, 2.0, -1.0)(broken[1])
    _set("completions.1.finish_reason", None)(broken[2])
    records, drops = decode_bundle(_bundle(wires[0], broken[0], wires[1], broken[1], broken[2], wires[2]))
    assert records == good
    assert drops == Counter({"version": 1, "bad_logprob": 1, "schema": 1})


# ------------------------------------------------------------------------- the bundle as a whole

@pytest.mark.parametrize("payload", ["text", None, 12, [b"\x28\xb5"], {"v": 1}])
def test_non_bytes_payload_is_schema(payload):
    with pytest.raises(RecordError) as exc:
        decode_bundle(payload)
    assert exc.value.reason == "schema"


def test_bytearray_and_memoryview_payloads_are_accepted():
    data = encode_bundle([_record()])
    assert decode_bundle(bytearray(data))[0] == decode_bundle(memoryview(data))[0] == [_record()]


@pytest.mark.parametrize("data, reason", [
    (b"", "zstd"),  # no frame at all
    (b"not zstd at all", "zstd"),
    (_pack({"v": 2, "records": []}) + b"trailing", "zstd"),  # bytes after the frame are not ignored
    (_pack({"v": 2, "records": []}) + _pack({"v": 2}), "zstd"),  # exactly one frame per bundle
    (zstandard.ZstdCompressor().compress(b"\xc1"), "msgpack"),  # 0xc1 is never used in msgpack
    (zstandard.ZstdCompressor().compress(b"\x91" * 5000 + b"\x01"), "msgpack"),  # 5000-deep nesting
    (zstandard.ZstdCompressor().compress(msgpack.packb({1: 2})), "msgpack"),  # non-string map key
    (zstandard.ZstdCompressor().compress(b"\xa2\xff\xfe"), "msgpack"),  # invalid UTF-8 string
    (_pack([1, 2]), "schema"),
    (_pack({"v": 2, "records": {"a": 1}}), "schema"),
    (_pack({"records": []}), "schema"),
    (_pack({"v": 1, "records": []}), "version"),  # a version 1 bundle (exchange by round)
    (_pack({"v": 3, "records": []}), "version"),
])
def test_bad_bundle_raises_with_reason(data, reason):
    with pytest.raises(RecordError) as exc:
        decode_bundle(data)
    assert exc.value.reason == reason


def test_empty_bundle_is_valid():
    assert decode_bundle(encode_bundle([])) == ([], Counter())


def test_truncated_bundle_is_an_error():
    data = encode_bundle([_record(index=i) for i in range(20)])
    for cut in (len(data) // 2, len(data) - 1):
        with pytest.raises(RecordError) as exc:
            decode_bundle(data[:cut])
        assert exc.value.reason == "zstd"


# ----------------------------------------------------------------------------------------- caps

def test_zstd_bomb_is_refused_while_streaming():
    # 10 MiB of zeros → a frame of a few hundred bytes that *declares* its 10 MiB content size
    bomb = zstandard.ZstdCompressor(level=19).compress(b"\0" * (10 << 20))
    assert len(bomb) < 1024
    # the hazard: the one-shot API trusts the header and ignores max_output_size
    assert len(zstandard.ZstdDecompressor().decompress(bomb, max_output_size=1000)) == 10 << 20
    caps = Caps(max_decompressed_bytes=1 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(RecordError) as exc:
            decode_bundle(bomb, caps)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert exc.value.reason == "too_large"
    assert peak < 3 << 20  # never more than the 1 MiB cap (+1 byte) and its list, far below 10 MiB


def test_zstd_bomb_without_declared_size_is_refused():
    bomb = zstandard.ZstdCompressor(write_content_size=False).compress(b"\0" * (4 << 20))
    with pytest.raises(RecordError) as exc:
        decode_bundle(bomb, Caps(max_decompressed_bytes=(4 << 20) - 1))
    assert exc.value.reason == "too_large"


def test_decompressed_size_exactly_at_cap_is_accepted():
    payload = msgpack.packb({"v": 2, "records": []}, use_bin_type=True)  # 0x82 a1 'v' 02 a7 'records' 90
    assert len(payload) == 1 + 2 + 1 + 8 + 1  # fixmap, fixstr "v", 2, fixstr "records", fixarray → 13
    data = zstandard.ZstdCompressor().compress(payload)
    assert decode_bundle(data, Caps(max_decompressed_bytes=13)) == ([], Counter())
    with pytest.raises(RecordError, match="too_large"):
        decode_bundle(data, Caps(max_decompressed_bytes=12))


def test_compressed_size_cap():
    data = encode_bundle([_record()])
    assert decode_bundle(data, Caps(max_compressed_bytes=len(data)))[0] == [_record()]
    with pytest.raises(RecordError) as exc:
        decode_bundle(data, Caps(max_compressed_bytes=len(data) - 1))
    assert exc.value.reason == "too_large"


def test_too_many_records():
    data = encode_bundle([_record(index=i) for i in range(3)])
    with pytest.raises(RecordError) as exc:
        decode_bundle(data, Caps(max_records=2))
    assert exc.value.reason == "too_many_records"
    # beyond every array cap msgpack itself stops before building the list
    with pytest.raises(RecordError) as exc:
        decode_bundle(data, Caps(max_records=2, max_completions=2))
    assert exc.value.reason == "too_large"


def test_too_many_completions_drops_that_record_only():
    three = tuple(Completion(str(i), (i + 1,), (-1.0,), "stop") for i in range(3))
    data = encode_bundle([_record(completions=three, index=0), _record(index=1)])
    records, drops = decode_bundle(data, Caps(max_completions=2))
    assert records == [_record(index=1)] and drops == Counter({"too_many_completions": 1})


def test_too_many_tokens():
    # max_tokens = 4: packed bins may hold 4 · 4 = 16 bytes (room for f32 logprobs), so 5 uint16 ids
    # (10 bytes) reach the per-completion count check, and 9 ids (18 bytes) stop msgpack itself
    caps = Caps(max_tokens=4)
    five = _record(completions=(Completion("x", (1, 2, 3, 4, 5), (-1.0,) * 5, "stop"),), index=0)
    records, drops = decode_bundle(encode_bundle([five, _record(index=1)]), caps)
    assert records == [_record(index=1)] and drops == Counter({"too_many_tokens": 1})
    nine = _record(completions=(Completion("x", tuple(range(1, 10)), (-1.0,) * 9, "stop"),))
    with pytest.raises(RecordError) as exc:
        decode_bundle(encode_bundle([nine]), caps)
    assert exc.value.reason == "too_large"


def test_oversize_strings():
    caps = Caps(max_text_chars=10)  # msgpack admits max(4 · 10, 1024) = 1024 UTF-8 bytes per string
    ok = _record(prompt="é" * 10, completions=(Completion("数" * 10, (1,), (-1.0,), "stop"),))  # 20 and 30 B
    assert decode_bundle(encode_bundle([ok]), caps) == ([ok], Counter())
    long_text = _record(completions=(Completion("a" * 11, (1,), (-1.0,), "stop"),), prompt="Q")
    long_prompt = _record(prompt="b" * 11, completions=ok.completions)
    records, drops = decode_bundle(encode_bundle([long_text, long_prompt]), caps)
    assert records == [] and drops == Counter({"too_long": 2})
    with pytest.raises(RecordError) as exc:  # 1025 bytes: refused while parsing
        decode_bundle(encode_bundle([_record(prompt="c" * 1025)]), caps)
    assert exc.value.reason == "too_large"


@pytest.mark.parametrize("field", ["max_compressed_bytes", "max_decompressed_bytes", "max_records",
                                   "max_completions", "max_tokens", "max_text_chars"])
@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_caps_must_be_positive_ints(field, value):
    with pytest.raises(ValueError, match=f"Caps.{field}"):
        Caps(**{field: value})


# ---------------------------------------------------------------------------------- announcements

def _ann(**kw) -> Announcement:
    base = dict(peer="peerA", window=170000000, count=16, nbytes=2650, sha256=sha256_hex(b"bundle"),
                policy_version=2, created_at=1700000000.5)
    return Announcement(**{**base, **kw})


def test_announcement_round_trip_and_digest():
    # 8 keys, a 64-char digest and small numbers: the msgpack map stays far below the 1 KiB DHT cap
    a = _ann()
    data = encode_announcement(a)
    assert decode_announcement(data) == a and len(data) < 200


@pytest.mark.parametrize("data", [
    "text", None, b"\xc1", b"x" * 1025,
    msgpack.packb({"peer": "p"}),
    encode_announcement(_ann(window=-1)),
    encode_announcement(_ann(policy_version=-1)),
    encode_announcement(_ann(nbytes=0)),
    encode_announcement(_ann(count=-1)),
    encode_announcement(_ann(sha256="Z" * 64)),
    encode_announcement(_ann(sha256="ab")),
    msgpack.packb({**asdict(_ann()), "created_at": math.nan}),
    msgpack.packb({**asdict(_ann()), "nbytes": "2650"}),
])
def test_bad_announcement(data):
    with pytest.raises(RecordError) as exc:
        decode_announcement(data)
    assert exc.value.reason == "bad_announcement"


def test_version_1_announcements_are_dropped_as_version():
    v1 = msgpack.packb({"peer": "peerA", "round": 3, "count": 16, "nbytes": 2650, "sha256": sha256_hex(b"bundle"),
                        "policy_version": 2, "created_at": 1700000000.5, "v": 1})
    with pytest.raises(RecordError) as exc:
        decode_announcement(v1)
    assert exc.value.reason == "version"


def test_float_created_at_survives_as_ieee_double():
    # msgpack float64: 0xcb + 8 bytes big-endian, so created_at is bit-exact after a round trip
    t = 1700000000.123456789
    assert msgpack.packb(t) == b"\xcb" + struct.pack(">d", t)
    assert decode_record(encode_record(replace(_record(), created_at=t))).created_at == t
