"""Findings 1, 3 and 4 at the ingest step: hostile decoded records are counted drops, never raises,
and the work they can cause is bounded before it is done.

  1  a task config with a binary value or ~1010 levels of nesting passed decoding and made
     ingest's json.dumps raise TypeError / RecursionError out of the round (the node exited 1);
  3  completions longer than this node's own budget or its context were trained on;
  4  aligned token ids were trained on while the reward was read from an unrelated text.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter

import pytest

from node.round.config import IngestConfig
from node.round.ingest import OwnModel, ingest
from node.tasks.source import render_prompt
from protocols.codec import decode_bundle, record_to_wire
from protocols.records import Completion
from tests.adversarial.hostile import (
    OTHER_FINGERPRINT,
    aligned_completion,
    deep,
    deep_config_record_wire,
    honest_record,
    raw_bundle,
    task_source,
)

LIMIT = 16


@pytest.fixture(scope="module")
def tasks():
    return task_source()


def _own(lm, tasks, limit=LIMIT, context=2048):
    return OwnModel(lm.tokenizer, lambda t: render_prompt(lm.tokenizer, t.question, None), limit, context)


def _ingest(lm, tasks, records, **kw):
    return ingest(records, tasks=tasks, cfg=IngestConfig(), own_fingerprint=lm.fingerprint,
                  own_vocab_size=lm.vocab_size, own=kw.pop("own", None) or _own(lm, tasks), **kw)


def _with_config(rec, config):
    return dataclasses.replace(rec, task=dataclasses.replace(rec.task, config=config))


def test_honest_record_is_accepted(tiny_qwen, tasks):
    result = _ingest(tiny_qwen, tasks, [honest_record(tiny_qwen, tasks)])
    assert result.drops == Counter() and len(result.groups) == 1
    assert result.groups[0].rewards == [1.0, 0.0, 1.0, 0.0]


@pytest.mark.parametrize("config", [
    {"min_terms": b"\x00\x01"},  # msgpack bin: decodes to bytes, json.dumps raised TypeError
    {"min_terms": 2, "x": [b"", {"y": b"z"}]},
    deep(1010),  # json.dumps raised RecursionError
    deep(9),
    {"min_terms": float("nan")},
    {"min_terms": 2, "many": list(range(5000))},
    {1: 2},
    ["not", "a", "map"],
])
def test_hostile_task_config_is_a_counted_drop(tiny_qwen, tasks, config):
    honest = honest_record(tiny_qwen, tasks, index=1)
    result = _ingest(tiny_qwen, tasks, [_with_config(honest_record(tiny_qwen, tasks), config), honest])
    assert result.drops == Counter({"bad_task": 1})
    assert len(result.groups) == 1  # the honest record beside it still counts


def test_deep_config_through_the_decoder(tiny_qwen, tasks):
    """The 1010-deep config arrives as real bundle bytes (the packer refuses to build it)."""
    wire = record_to_wire(honest_record(tiny_qwen, tasks))
    records, drops = decode_bundle(raw_bundle([deep_config_record_wire(wire, 1010)]))
    assert drops == Counter() and len(records) == 1  # the decoder lets it through ...
    assert _ingest(tiny_qwen, tasks, records).drops == Counter({"bad_task": 1})  # ... ingest drops it


def test_an_exception_inside_ingest_costs_one_record_not_the_round(tiny_qwen, tasks, monkeypatch):
    real = tasks.check_external
    calls = []

    def flaky(ref):
        calls.append(ref)
        if len(calls) == 1:
            raise MemoryError("boom")
        return real(ref)

    monkeypatch.setattr(tasks, "check_external", flaky)
    recs = [honest_record(tiny_qwen, tasks, index=i) for i in range(2)]
    result = _ingest(tiny_qwen, tasks, recs)
    assert result.drops == Counter({"internal_error": 1}) and len(result.groups) == 1


def test_completion_longer_than_our_budget_is_dropped(tiny_qwen, tasks):
    """Finding 3: 8 completions × 1024 tokens (within every wire cap) against our 16-token budget."""
    tok = tiny_qwen.tokenizer
    honest = honest_record(tiny_qwen, tasks)
    long = Completion(tok.decode([40] * 1024, skip_special_tokens=True), (40,) * 1024, (-0.1,) * 1024, "length")
    bomb = dataclasses.replace(honest, completions=(long,) * 8)
    at_limit = aligned_completion(tok, "<answer>7</answer>")
    assert len(at_limit.token_ids) <= LIMIT
    result = _ingest(tiny_qwen, tasks, [bomb, honest])
    assert result.drops == Counter({"completion_too_long": 1}) and len(result.groups) == 1
    # unaligned, the sender's own count is held to the same budget whatever its text says
    other = dataclasses.replace(bomb, model=dataclasses.replace(bomb.model, tokenizer=OTHER_FINGERPRINT),
                                completions=(dataclasses.replace(long, text="<answer>1</answer>"),) * 8)
    assert _ingest(tiny_qwen, tasks, [other]).drops == Counter({"completion_too_long": 1})


def test_unaligned_text_is_bounded_before_it_is_tokenised(tiny_qwen, tasks):
    honest = honest_record(tiny_qwen, tasks, aligned=False)
    huge = Completion("9" * (1 << 20), (1,), (-0.1,), "length")  # one token claimed, 1 Mi characters
    mid = Completion("1 " * 200, (1,), (-0.1,), "length")  # fits in characters, not in 4 × 16 of our tokens
    calls = Counter()
    tok = tiny_qwen.tokenizer

    class CountingTokenizer:
        def __call__(self, text, **kw):
            calls["chars"] += len(text)
            return tok(text, **kw)

        def __getattr__(self, name):
            return getattr(tok, name)

    own = OwnModel(CountingTokenizer(), lambda t: render_prompt(tok, t.question, None), LIMIT, 2048)
    result = _ingest(tiny_qwen, tasks, [dataclasses.replace(honest, completions=(huge,) * 4),
                                        dataclasses.replace(honest, completions=(mid,) * 4), honest], own=own)
    assert result.drops == Counter({"completion_too_long": 2}) and len(result.groups) == 1
    assert calls["chars"] < 10_000  # the 4 Mi characters were never tokenised


def test_prompt_plus_completion_beyond_our_context_is_dropped(tiny_qwen, tasks):
    rec = honest_record(tiny_qwen, tasks)
    prompt_len = len(tiny_qwen.tokenizer(rec.prompt, add_special_tokens=False)["input_ids"])
    longest = max(len(c.token_ids) for c in rec.completions)
    fits = _ingest(tiny_qwen, tasks, [rec], own=_own(tiny_qwen, tasks, context=prompt_len + longest))
    over = _ingest(tiny_qwen, tasks, [rec], own=_own(tiny_qwen, tasks, context=prompt_len + longest - 1))
    assert len(fits.groups) == 1 and over.drops == Counter({"context_overflow": 1})


def test_aligned_ids_that_do_not_say_the_text_are_dropped(tiny_qwen, tasks):
    """Finding 4: a correct-answer text over arbitrary ids used to train those ids with A > 0."""
    honest = honest_record(tiny_qwen, tasks)
    noise = tuple((7 * i + 11) % 300 + 5 for i in range(10))
    forged = tuple(dataclasses.replace(c, token_ids=noise, logprobs=(-0.1,) * len(noise)) if i % 2 == 0 else c
                   for i, c in enumerate(honest.completions))  # correct texts, garbage ids
    result = _ingest(tiny_qwen, tasks, [dataclasses.replace(honest, completions=forged), honest])
    assert result.drops == Counter({"ids_text_mismatch": 1}) and len(result.groups) == 1
    # an unaligned peer's ids are never trained on: its text alone counts, so the same record passes
    unaligned = dataclasses.replace(honest, completions=forged,
                                    model=dataclasses.replace(honest.model, tokenizer=OTHER_FINGERPRINT))
    assert len(_ingest(tiny_qwen, tasks, [unaligned]).groups) == 1


def test_verification_of_answer_tag_spam_is_linear(tiny_qwen, tasks):
    """Finding 2: '<answer>' × 8k (64k characters) took ~10 s to verify; a node whose budget admits
    such a completion must still verify it in milliseconds."""
    text = "<answer>" * 8192
    ids = tuple(tiny_qwen.tokenizer(text, add_special_tokens=False)["input_ids"])
    honest = honest_record(tiny_qwen, tasks)
    spam = Completion(tiny_qwen.tokenizer.decode(list(ids), skip_special_tokens=True), ids, (-0.1,) * len(ids),
                      "length")
    rec = dataclasses.replace(honest, completions=(spam,) * 2 + honest.completions[:2])
    started = time.thread_time()  # this thread's CPU time: the work, not the machine's load
    result = _ingest(tiny_qwen, tasks, [rec], own=_own(tiny_qwen, tasks, limit=len(ids), context=None))
    seconds = time.thread_time() - started
    assert len(result.groups) == 1 and result.groups[0].rewards == [0.0, 0.0, 1.0, 0.0]
    assert seconds < 2.0, f"verifying 2 × 64k characters of tag spam took {seconds:.1f} s"
