"""Greedy decoding of the `hf` backend's loop gives transformers `generate`'s tokens on the trained lab model
(lab-spell, built offline on first use), on its own task's prompts: 32 of them, left-padded in one batch."""

from __future__ import annotations

import pytest

from node.models.config import ModelConfig
from node.models.load import load_model
from node.tasks.config import DatasetSpec, TaskConfig
from node.tasks.source import TaskSource, render_prompt
from tests.unit.node.test_decode_loop import greedy_matches_generate

pytestmark = pytest.mark.slow


def test_greedy_equals_generate_on_lab_spell(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    lm = load_model(ModelConfig(spec="lab-spell"))
    source = TaskSource(TaskConfig(datasets=[DatasetSpec(name="spell_backward",
                                                          config={"min_word_len": 3, "max_word_len": 6})],
                                   system_prompt=None, eval_size=0))
    prompts = [render_prompt(lm.tokenizer, t.question, None) for t in source.sample(0, 32)]
    assert len({len(lm.tokenizer(p)["input_ids"]) for p in prompts}) > 1  # several lengths: left padding
    greedy_matches_generate(lm, prompts, max_new_tokens=16)
