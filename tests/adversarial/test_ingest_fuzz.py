"""Fuzz of the receive path past the decoder (finding 1's guard, findings 3–4's bounds): thousands
of seeded, decoded-but-hostile records go through `ingest`, and raw mutations of real bundles go
through `decode_bundle` then `ingest`. Nothing may raise, every record is either a group or one
counted drop, no record breaking an invariant is accepted, and no case takes long.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time

import msgpack
import pytest
import zstandard

from node.round.config import IngestConfig
from node.round.ingest import RETOKENISED_SLACK, OwnModel, ingest
from node.tasks.gym import config_key
from node.tasks.source import render_prompt
from protocols.codec import RecordError, decode_bundle, encode_bundle
from protocols.records import (
    Completion,
    ModelInfo,
    RolloutRecord,
    SamplingInfo,
    TaskRef,
)
from tests.adversarial.hostile import CHAIN_SUM, deep, honest_record, task_source

SEED, CASES, BYTE_CASES = 16, 5000, 2000
LIMIT, CONTEXT = 16, 2048
PER_CASE_S, TOTAL_S = 2.0, 150.0


def _value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(12 if depth < 3 else 8)
    return [
        lambda: None, lambda: rng.random() < 0.5, lambda: rng.choice([0, 1, -1, 2**63 - 1, -(2**63), 10**30]),
        lambda: rng.choice([0.5, float("nan"), float("inf"), -0.0, 1e308]),
        lambda: rng.choice(["", "\x00", "é" * 3, "<answer>", "a" * 5000]),
        lambda: rng.randbytes(rng.randrange(8)), lambda: 2, lambda: "x",
        lambda: [_value(rng, depth + 1) for _ in range(rng.randrange(4))],
        lambda: {rng.choice(["min_terms", "max_terms", "k", "", 1, b"b"]): _value(rng, depth + 1)
                 for _ in range(rng.randrange(4))},
        lambda: deep(rng.choice([9, 200, 1100])), lambda: (1, 2),
    ][kind]()


def _text(rng: random.Random, answer: str) -> str:
    return rng.choice([
        f"<answer>{answer}</answer>", "<answer>0</answer>", "", "<answer>" * rng.randrange(1, 3000),
        "9" * rng.randrange(1, 5000), "\x00<|end|><pad>", "</answer><answer>" * 50,
        f"<answer> {answer} </answer>" + "x" * rng.randrange(100), "数字" * 30, "\u2028ok\x85",
    ])


def _mutate(rec: RolloutRecord, rng: random.Random, lm, answer: str) -> RolloutRecord:
    tok, fp = lm.tokenizer, lm.fingerprint
    changes: dict = {}
    if rng.random() < 0.3:
        changes["task"] = TaskRef(
            rng.choice(["chain_sum", "chain_sum", "basic_arithmetic", "nope", ""]),
            rng.choice([dict(CHAIN_SUM), _value(rng), {**CHAIN_SUM, "x": _value(rng)}]),
            rng.choice([0, -1, 2**63 - 1]), rng.choice([0, 1, -5, 10**12]))
    if rng.random() < 0.2:
        changes["prompt"] = rng.choice(["", rec.prompt * rng.randrange(1, 50), "x" * 10_000, rec.prompt[5:]])
    if rng.random() < 0.2:
        changes["model"] = ModelInfo(rng.choice(["m", ""]), rng.choice([fp, "0" * 64, "zz"]),
                                     rng.choice([lm.vocab_size, 1, 2**24, 0]))
    if rng.random() < 0.2:
        changes["round"] = rng.choice([0, -1, 10**9, -(10**9)])
    if rng.random() < 0.2:
        changes["created_at"] = rng.choice([0.0, time.time() + 1e6, float("nan"), float("inf"), -1e300])
    if rng.random() < 0.1:
        changes["sampling"] = SamplingInfo(rng.choice([1.0, 0.0, -1.0]), 1.0, rng.choice([1, 0, 10**9]))
    if rng.random() < 0.6:
        comps = []
        for _ in range(rng.choice([0, 1, 2, 4, 8, 40])):
            text = _text(rng, answer)
            mode = rng.randrange(5)
            if mode == 0:  # honest ids for the text
                ids = tok(text, add_special_tokens=False)["input_ids"] or [tok.eos_token_id]
            elif mode == 1:
                ids = [rng.randrange(lm.vocab_size) for _ in range(rng.randrange(1, 40))]
            elif mode == 2:
                ids = [rng.choice([0, lm.vocab_size - 1, lm.vocab_size, 2**31, -1])] * rng.randrange(0, 3000)
            elif mode == 3:
                ids = []
            else:
                ids = [40] * rng.randrange(1, 64)
            lps = rng.choice([[-0.5] * len(ids), [0.5] * len(ids), [float("nan")] * len(ids), [-0.5]])
            comps.append(Completion(text, tuple(ids), tuple(lps), rng.choice(["stop", "length", "?"]),
                                    rng.choice([None, 1.0, float("nan")])))
        changes["completions"] = tuple(comps)
    return dataclasses.replace(rec, **changes)


def _check_accepted(group, lm, allowed_key: str) -> None:
    tok = lm.tokenizer
    assert config_key(group.task.ref.config) == allowed_key and group.task.ref.dataset == "chain_sum"
    assert len(group.completions) >= 2 and all(0.0 <= r <= 1.0 for r in group.rewards)
    assert all(math.isfinite(a) for a in group.advantages)
    for c in group.completions:
        if group.aligned:
            assert len(c.token_ids) <= LIMIT and all(0 <= t < lm.vocab_size for t in c.token_ids)
            assert tok.decode(list(c.token_ids), skip_special_tokens=True) == c.text
        else:  # the sender's count within the budget, ours within RETOKENISED_SLACK × it
            assert len(c.token_ids) <= LIMIT
            assert len(tok(c.text, add_special_tokens=False)["input_ids"]) < RETOKENISED_SLACK * LIMIT


def _run(lm, tasks, records):
    own = OwnModel(lm.tokenizer, lambda t: render_prompt(lm.tokenizer, t.question, None), LIMIT, CONTEXT)
    started = time.thread_time()  # CPU time of this thread: what ingest did, not how long a busy machine made it wait
    result = ingest(records, tasks=tasks, cfg=IngestConfig(), own_fingerprint=lm.fingerprint,
                    own_vocab_size=lm.vocab_size, own=own)
    return result, time.thread_time() - started


def test_fuzz_ingest_with_hostile_decoded_records(tiny_qwen):
    tasks = task_source()
    rng = random.Random(SEED)
    base = [honest_record(tiny_qwen, tasks, index=i) for i in range(4)]
    answers = [tasks.sample(0, 4)[i].answer for i in range(4)]
    allowed = config_key(CHAIN_SUM)
    started, accepted, reasons = time.thread_time(), 0, set()
    for case in range(CASES):
        i = rng.randrange(4)
        rec = _mutate(base[i], rng, tiny_qwen, answers[i])
        result, seconds = _run(tiny_qwen, tasks, [rec])
        assert len(result.groups) + sum(result.drops.values()) == 1, (case, result)
        assert seconds < PER_CASE_S, f"case {case} took {seconds:.2f} s"
        assert "internal_error" not in result.drops, f"case {case}: ingest raised inside (see log)"
        for g in result.groups:
            _check_accepted(g, tiny_qwen, allowed)
        accepted += len(result.groups)
        reasons |= set(result.drops)
    assert time.thread_time() - started < TOTAL_S
    assert 0 < accepted < CASES  # the fuzz reaches both outcomes
    assert {"bad_task", "completion_too_long", "ids_text_mismatch", "bad_token_id"} <= reasons, reasons


def test_fuzz_bundle_bytes_then_ingest(tiny_qwen):
    tasks = task_source()
    rng = random.Random(SEED + 1)
    payload = msgpack.packb(msgpack.unpackb(zstandard.ZstdDecompressor().decompress(
        encode_bundle([honest_record(tiny_qwen, tasks, index=i) for i in range(2)])), raw=False), use_bin_type=True)
    started, decoded = time.thread_time(), 0
    for case in range(BYTE_CASES):
        data = bytearray(payload)
        for _ in range(rng.randrange(1, 6)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            records, _ = decode_bundle(zstandard.ZstdCompressor(level=1).compress(bytes(data)))
        except RecordError:
            continue
        decoded += 1
        result, seconds = _run(tiny_qwen, tasks, records)
        assert len(result.groups) + sum(result.drops.values()) == len(records)
        assert seconds < PER_CASE_S and "internal_error" not in result.drops, case
    assert decoded > BYTE_CASES // 10
    assert time.thread_time() - started < TOTAL_S


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_timestamps_are_counted(tiny_qwen, bad):
    tasks = task_source()
    rec = dataclasses.replace(honest_record(tiny_qwen, tasks), created_at=bad)
    result, _ = _run(tiny_qwen, tasks, [rec])
    assert sum(result.drops.values()) == 1 and not result.groups
