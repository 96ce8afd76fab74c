"""deploy/wheelhouse.py: what an offline box with torch, transformers and peft still needs (no download here)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location("wheelhouse", Path(__file__).parents[2] / "deploy" / "wheelhouse.py")
wheelhouse = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(wheelhouse)


def test_the_wheelhouse_holds_what_torch_transformers_and_peft_do_not_bring():
    need = wheelhouse.needed(["torch", "transformers", "peft"])
    brought = wheelhouse.closure(["torch", "transformers", "peft"])
    assert {"hivemind", "reasoning-gym", "zstandard", "msgpack"} <= set(need)
    assert not set(need) & set(brought)  # torch, numpy, tokenizers, accelerate, ... stay out
    assert "torch" in brought and "accelerate" in brought
    ours = wheelhouse.closure([wheelhouse.PROJECT])
    assert set(need) | set(brought) >= set(ours) - {wheelhouse.PROJECT}  # nothing the project requires is missed
    smaller = wheelhouse.needed(["torch", "transformers", "peft", "scipy", "matplotlib"])
    assert set(smaller) < set(need) and "scipy" in need and "scipy" not in smaller


@pytest.mark.parametrize("argv, message", [(["--python-version", "twelve"], "--python-version"),
                                           (["--present", "no-such-dist"], "not installed")])
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys, tmp_path):
    assert wheelhouse.main(["--out", str(tmp_path / "w"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
