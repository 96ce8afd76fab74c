"""Finding 9 (fingerprint): docs/PROTOCOL.md §2.1 defines the tokenizer fingerprint exactly.

`fingerprint_from_file` below is an outside client's implementation of §2.1: it reads nothing
but `tokenizer.json` and imports nothing of this repository. Before §2.1 existed an outside
client had to copy the value from a node's records, and the interop test used a dummy value,
so aligned ids (which need equal fingerprints) were never exercised from outside.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest


def fingerprint_from_file(tokenizer_json: Path) -> str:
    """docs/PROTOCOL.md §2.1, steps 1–5."""
    spec = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    spec.pop("padding", None)
    spec.pop("truncation", None)
    model = spec.get("model") or {}
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if key in model and model[key] is None:
            model[key] = ""
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@pytest.mark.parametrize("alias", ["tiny-qwen2", "tiny-llama", "lab-chain-sum"])
def test_outside_client_computes_the_nodes_fingerprint(alias):
    from node.models.config import ModelConfig
    from node.models.load import (
        BUILTIN_MODELS,
        default_cache_dir,
        load_model,
        resolve_model_dir,
    )

    assert alias in BUILTIN_MODELS
    if alias == "lab-chain-sum" and not any((default_cache_dir() / "models").glob("lab-chain-sum-v*")):
        pytest.skip("lab-chain-sum is not built here (tests/slow builds it)")
    path = resolve_model_dir(alias)
    assert fingerprint_from_file(path / "tokenizer.json") == load_model(ModelConfig(spec=alias)).fingerprint


def test_the_two_tiny_tokenizers_differ():
    from node.models.load import resolve_model_dir

    a, b = (fingerprint_from_file(resolve_model_dir(m) / "tokenizer.json") for m in ("tiny-qwen2", "tiny-llama"))
    assert a != b


def test_a_record_fingerprinted_from_the_file_is_aligned(tiny_qwen):
    """An outside sender that computes §2.1 gets its token ids used, not re-tokenised."""
    from node.models.load import resolve_model_dir
    from node.round.config import IngestConfig
    from node.round.ingest import OwnModel, ingest
    from node.tasks.source import render_prompt
    from tests.adversarial.hostile import honest_record, task_source

    tasks = task_source()
    rec = honest_record(tiny_qwen, tasks)
    outside = dataclasses.replace(rec, model=dataclasses.replace(
        rec.model, tokenizer=fingerprint_from_file(resolve_model_dir("tiny-qwen2") / "tokenizer.json")))
    own = OwnModel(tiny_qwen.tokenizer, lambda t: render_prompt(tiny_qwen.tokenizer, t.question, None), 16, 2048)
    result = ingest([outside], tasks=tasks, cfg=IngestConfig(), own_fingerprint=tiny_qwen.fingerprint,
                    own_vocab_size=tiny_qwen.vocab_size, own=own)
    assert len(result.groups) == 1 and result.groups[0].aligned
