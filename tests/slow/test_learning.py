"""The learning test (docs/ARCHITECTURE.md §11): RL on the lab model raises its sampled accuracy on fresh items.

`lab-chain-sum` starts at ≈ 15–20 % sampled accuracy (greedy ≈ 31 %, so sharpening alone has
headroom). One node of examples/lab-solo.yaml (GRPO token-mean, B = 8 prompts × G = 16, lr 5e-5)
runs 30 rounds on one torch thread, measured by bench/learning_margin.py:

  before  held-out accuracy of the warm start: 512 fixed items, one sample each at T = 1
  after   the same 512 items after round 29
  early   mean rollout accuracy of rounds 0–4 (5 × 128 completions)
  late    mean rollout accuracy of rounds 25–29: 5 × 128 completions on items never seen before

MEASURED (`python -m bench.learning_margin 0 1 2 3 4 5 6 7`, 2 quiet CPU cores, ≈ 40–55 s per run;
a run is deterministic on one thread: the CI run of seed 0 reproduced these digits exactly):

  seed  before  after   gain    early   late   late−before
  0     0.184   0.189  +0.006   0.194   0.231  +0.048
  1     0.180   0.184  +0.004   0.169   0.248  +0.069
  2     0.152   0.182  +0.029   0.183   0.242  +0.090
  3     0.182   0.188  +0.006   0.184   0.292  +0.111
  4     0.160   0.213  +0.053   0.184   0.273  +0.113
  5     0.172   0.213  +0.041   0.197   0.270  +0.098
  6     0.162   0.209  +0.047   0.194   0.230  +0.068
  7     0.189   0.191  +0.002   0.197   0.247  +0.057

  late − before: mean 0.082, std 0.025 across seeds, min 0.048 (seed 0, the one tested)
  gain (held-out): positive on all 8 seeds, mean 0.024, min 0.002

Noise: one held-out accuracy on 512 items has binomial std √(0.18·0.82/512) = 0.017; `late`
(640 completions, items differ per round) adds ≈ 0.03, so late − before has std ≈ 0.035 per run,
in line with the 0.025 spread across seeds. MARGIN = 0.03 is mean − 2 std of the measured runs
and every seed clears it. The held-out gain alone is within 1 σ of zero on most seeds, so on it
we only assert the direction, which every measured run showed. (An earlier revision of the round
code drew different samples for the same seeds: late − before 0.114 / 0.069 / 0.068 / 0.069 for
seeds 0–3, so the spread above is the honest one to size the margin on.) At lr 1e-4 held-out
gains were +0.078, +0.033, −0.008, −0.033: that rate is not robust on this model.
"""

from __future__ import annotations

import pytest

from bench.learning_margin import measure

pytestmark = pytest.mark.slow

MARGIN = 0.03  # late − before; measured mean 0.082, std 0.025, min 0.048 over seeds 0–7 (table above)


def test_lab_model_learns():
    result = measure(0, "examples/lab-solo.yaml", 30, {}, greedy=False, trace=False)
    before, late, after = result["before"], result["late"], result["after"]
    assert late - before >= MARGIN, f"sampled accuracy {before:.3f} -> rollouts {late:.3f}"
    assert after > before, f"held-out accuracy {before:.3f} -> {after:.3f}"  # same items agree in direction
