"""The learning test (docs/ARCHITECTURE.md §11): RL on the lab model raises held-out accuracy, and a
frozen policy on the same task stream does not.

One node of examples/lab-solo.yaml (`lab-spell`, spell_backward with 3–6 letters; GRPO token-mean,
B = 8 prompts × G = 8, lr 1e-4) runs its 40 rounds twice on one torch thread through the project's
own round code (bench/learning_margin.py):

  trained   the example as written
  frozen    train.lr = 0: the same seed, task stream, held-out items and sampling; weights never move

Held-out: 512 items of the held-out block (never trained on) × 4 samples each; per item the change
after − before, so gain = mean change and its standard error is over items. The test asserts the
trained gain minus the frozen gain (`effect`) clears MARGIN, and that the trained gain alone is more
than 3 standard errors. With training disabled the effect is ≈ 0 and the test fails.

MARGIN is sized on 8 seeds (`python -m bench.learning_margin 0 1 2 3 4 5 6 7`, 2 CPU cores,
≈ 65 s per seed; a run is deterministic on one thread): see EFFECT below and docs/BENCHMARKS.md
"Learning" for the per-seed table.
"""

from __future__ import annotations

import pytest

from bench.learning_margin import measure

pytestmark = pytest.mark.slow

EFFECT = {"mean": 0.135, "sd": 0.014, "min": 0.123}  # seeds 0–2 so far (bench/results/learning_margin.jsonl)
MARGIN = 0.06


def test_lab_model_learns_and_a_frozen_policy_does_not():
    result = measure(0, "examples/lab-solo.yaml", 40, {})
    trained, frozen = result["trained"], result["frozen"]
    assert trained["before"] == frozen["before"]  # the same items, the same warm start
    assert result["effect"] >= MARGIN, result
    assert trained["gain"] > 3 * trained["se"], trained
    assert abs(frozen["gain"]) < 3 * frozen["se"] + 0.01, frozen  # the control sees only sampling noise
