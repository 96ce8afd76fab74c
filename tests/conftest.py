"""Shared fixtures: built-in tiny models (built offline once into the user cache, then reused)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_qwen():
    from node.models.config import ModelConfig
    from node.models.load import load_model

    return load_model(ModelConfig(spec="tiny-qwen2"))


@pytest.fixture(scope="session")
def tiny_llama():
    from node.models.config import ModelConfig
    from node.models.load import load_model

    return load_model(ModelConfig(spec="tiny-llama"))
