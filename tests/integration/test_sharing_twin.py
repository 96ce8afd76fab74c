"""The deterministic twin (`--twin rounds`, bench.harness.swarm): a swarm arm with peers, and the solo control that
replays its own groups to the swarm node's trained tokens, reproduce to the last digit in two processes with
different hash seeds, one of them beside a busy loop on every core — what the wall-clock twin could not (its
fetch windows ran on wall time, so which peers' groups a round got depended on the machine's load)."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["--arms", "C", "RC", "--update", "f-tis=loss={name: f-tis}", "--seeds", "0", "--rounds", "4", "--nodes", "2",
        "--set", "tasks.eval_size=48", "--set", "eval.samples=1", "--tag", "_twin"]
TIMINGS = {"seconds", "s_per_node_round", "round_s"}  # wall time: the only fields allowed to differ


def _burn(stop_at: float) -> None:
    while time.time() < stop_at:
        pass


def _run(out: Path, hash_seed: str) -> dict:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "bench.learning.sharing", *ARGS, "--results", str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {r["arm"]: r for r in json.loads((out / "sharing_twin.json").read_text())["runs"]}


def test_a_swarm_arm_and_its_replay_control_reproduce_to_the_last_digit_under_load(tmp_path):
    quiet = _run(tmp_path / "quiet", "1")
    burners = [multiprocessing.Process(target=_burn, args=(time.time() + 900,), daemon=True)
               for _ in range(os.cpu_count() or 2)]
    for b in burners:
        b.start()
    try:
        loaded = _run(tmp_path / "loaded", "2")
    finally:
        for b in burners:
            b.terminate()
    assert set(quiet) == set(loaded) == {"C", "RC"}
    for arm in ("C", "RC"):
        a, b = quiet[arm], loaded[arm]
        assert a["twin"] == "rounds" and a["delay"] == 1
        assert {k: v for k, v in a.items() if k not in TIMINGS} == {k: v for k, v in b.items() if k not in TIMINGS}
    c, rc = quiet["C"], quiet["RC"]
    # the swarm node trained on its peer's groups (none in round 0: delivered from round 1) ...
    assert c["external_groups"] > 0 and all(r[0] > 0 for r in c["trained_by_round"])
    # ... and the node alone replayed its own to about as many trained tokens, round by round
    assert rc["external_groups"] == 0 and rc["groups_replayed"] > 0
    assert abs(rc["tokens_trained"] - c["tokens_trained"]) < 0.15 * c["tokens_trained"]
    assert rc["after"] != c["after"] or rc["trained_by_round"] != c["trained_by_round"]  # different data, trained
