"""Shared material of the adversarial tests: an honest record for a real task, and hostile variants.

Everything here builds *decoded* records (protocols.records dataclasses) or raw bundle bytes the
way a hostile peer would: nothing in this module trusts the receiver's checks.
"""

from __future__ import annotations

import time

import msgpack
import zstandard

from node.tasks.config import DatasetSpec, TaskConfig
from node.tasks.source import TaskSource, render_prompt
from protocols.records import (
    SCHEMA_VERSION,
    Completion,
    ModelInfo,
    RolloutRecord,
    SamplingInfo,
)

CHAIN_SUM = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
OTHER_FINGERPRINT = "f" * 64


def task_source(seed: int = 0) -> TaskSource:
    return TaskSource(TaskConfig(datasets=[DatasetSpec(name="chain_sum", config=CHAIN_SUM)], seed=seed,
                                 system_prompt=None, eval_size=0))


def aligned_completion(tokenizer, text: str, stop: bool = True) -> Completion:
    """A completion whose ids are our tokenizer's encoding of `text` (+ eos): what an honest peer
    with our tokenizer sends; its text is what our generation would decode from those ids."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + ([tokenizer.eos_token_id] if stop else [])
    decoded = tokenizer.decode(ids, skip_special_tokens=True)
    return Completion(decoded, tuple(ids), tuple([-0.5] * len(ids)), "stop" if stop else "length")


def honest_record(lm, tasks: TaskSource, *, index: int = 0, round_: int = 0, peer: str = "peer-h",
                  swarm: str = "rlswarm", aligned: bool = True, texts: list[str] | None = None,
                  now: float | None = None) -> RolloutRecord:
    """A group of 4 for a real allowed task: two correct answers, two wrong ones."""
    task = tasks.sample(0, index + 1)[index]
    prompt = render_prompt(lm.tokenizer, task.question, None)
    texts = texts or [f"<answer>{task.answer}</answer>", "<answer>-1</answer>"] * 2
    comps = tuple(aligned_completion(lm.tokenizer, t) for t in texts)
    fp = lm.fingerprint if aligned else OTHER_FINGERPRINT
    return RolloutRecord(swarm=swarm, peer=peer, round=round_, policy_version=0,
                         created_at=time.time() if now is None else now,
                         model=ModelInfo("tiny-qwen2", fp, lm.vocab_size), sampling=SamplingInfo(1.0, 1.0, 16),
                         task=task.ref, prompt=prompt, completions=comps)


def deep(depth: int, leaf=1) -> dict:
    out = leaf
    for _ in range(depth):
        out = {"k": out}
    return out


def raw_bundle(records_wire: list[bytes]) -> bytes:
    """zstd(msgpack({"v": SCHEMA_VERSION, "records": [...]})) from already-packed record maps (any bytes at all)."""
    n = len(records_wire)
    head = msgpack.packb({"v": SCHEMA_VERSION}, use_bin_type=True)[1:]  # the map's one pair, without its header
    body = b"\x82" + head + msgpack.packb("records") + b"\xdd" + n.to_bytes(4, "big") + b"".join(records_wire)
    return zstandard.ZstdCompressor(level=10).compress(body)


def deep_config_record_wire(record_wire: dict, depth: int) -> bytes:
    """A packed record whose task.config nests `depth` maps deep (deeper than msgpack's packer allows)."""
    marker = {"__deep__": 0}
    wire = dict(record_wire)
    wire["task"] = {**wire["task"], "config": marker}
    packed = msgpack.packb(wire, use_bin_type=True)
    nested = b"\x81\xa1k" * depth + b"\x01"
    hole = msgpack.packb(marker, use_bin_type=True)
    assert packed.count(hole) == 1
    return packed.replace(hole, b"\x81\xa1k" + nested)
