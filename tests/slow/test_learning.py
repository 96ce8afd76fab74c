"""The learning test (DESIGN §12): RL on the lab model raises its sampled accuracy on fresh items.

`lab-chain-sum` starts at ≈ 15–20 % sampled accuracy (greedy ≈ 31 %, so sharpening alone has
headroom). One node of examples/lab-solo.yaml (GRPO token-mean, B = 8 prompts × G = 16, lr 5e-5)
runs 30 rounds on one torch thread, measured by bench/learning_margin.py:

  before  held-out accuracy of the warm start: 512 fixed items, one sample each at T = 1
  after   the same 512 items after round 29
  late    mean rollout accuracy of rounds 25–29: 5 × 128 completions on items never seen before

MEASURED (`python -m bench.learning_margin 0 1 2 3`, 2 shared cores, 440–465 s per run under load;
the greedy column is held-out greedy accuracy, 0.307 before on every seed):

  seed  before  after   gain    late   late−before  greedy after
  0     0.150   0.246  +0.096   0.264  +0.114       0.371
  1     0.195   0.236  +0.041   0.264  +0.069       0.334
  2     0.197   0.215  +0.018   0.266  +0.068       0.313
  3     0.201   0.215  +0.014   0.270  +0.069       0.309

  late − before: mean 0.080, std 0.023 across seeds, min 0.068
  gain (held-out): mean 0.042, std 0.038, min 0.014

Noise: one held-out accuracy on 512 items has binomial std √(0.2·0.8/512) = 0.018; `late`
(640 completions, but items differ per round) has std ≈ 0.07/√5 = 0.03 from the per-round spread,
so late − before has std ≈ √(0.018² + 0.03²) = 0.035. MARGIN = 0.05 is cleared by every measured
run (min 0.068, i.e. 0.5 σ above MARGIN; mean 0.080 is 0.9 σ above). The held-out gain alone is
within 1 σ (0.025) of zero on seeds 2 and 3, so on it we only assert the direction, which every
measured run showed. For comparison at lr 1e-4 (same B, G) held-out gains were +0.078, +0.033,
−0.008, −0.033: that rate is not robust on this model.
"""

from __future__ import annotations

import pytest

from bench.learning_margin import measure

pytestmark = pytest.mark.slow

MARGIN = 0.05  # late − before; measured min 0.068 over seeds 0–3 (table above)


def test_lab_model_learns():
    result = measure(0, "examples/lab-solo.yaml", 30, {}, greedy=False, trace=False)
    before, late, after = result["before"], result["late"], result["after"]
    assert late - before >= MARGIN, f"sampled accuracy {before:.3f} -> rollouts {late:.3f}"
    assert after > before, f"held-out accuracy {before:.3f} -> {after:.3f}"  # same items agree in direction
