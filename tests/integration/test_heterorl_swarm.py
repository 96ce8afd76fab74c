"""HeteroRL on real `swarm node` processes (127.0.0.1): a learner and two samplers that follow it.

1. The samplers load each new version the learner broadcasts and tag their records with it, so the
   versions advance as the learner steps; the learner holds every record for a simulated delay and
   drops (and counts) the ones older than ingest.max_delay_steps = 0: a sampler keeps sampling with
   version v while the learner steps to v + 1, so some of its records always arrive stale.
2. kill -9 of the learner: the samplers keep going on the last weights they loaded.
3. The learner restarted with the same identity resumes from its checkpoint, and the samplers load
   the next version it publishes.
Every node is `tiny-qwen2` on one torch thread, on the byo arithmetic file with a reward a random model
can earn (odd-length answers), so each step changes the weights.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import yaml

from swarm.host.local import Child, start_node
from tests.integration.test_open_swarm import _rows

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
# a random model answers no sum right; a reward it can earn gives nonzero advantages, so every step
# changes the weights and every version is a new file to broadcast
REWARD = "def parity(prompts, completions, **kwargs):\n    return [float(len(c) % 2) for c in completions]\n"


def _config(tmp: Path, name: str, role: str, **heterorl) -> str:
    cfg = {
        "name": name, "seed": sum(map(ord, name)) % 1000, "rounds": 10_000, "torch_threads": 1, "role": role,
        "model": {"spec": "tiny-qwen2"},
        "tasks": {"datasets": [{"file": str(ROOT / "examples/byo/arithmetic.jsonl"), "reward": f"{tmp}/reward.py:parity"}],
                  "system_prompt": None, "eval_size": 0, "seed": sum(map(ord, name))},
        "generation": {"prompts_per_round": 2, "group_size": 4, "max_new_tokens": 8},
        "select": {"local_groups": 0, "external_groups": 2, "drop_zero_advantage": False},
        "train": {"lr": 1e-3},
        "swarm": {"enabled": True, "poll_interval_s": 0.2},
        "heterorl": {"poll_interval_s": 0.2, "wait_s": 10, **heterorl},
        "eval": {"every": 0}, "checkpoint": {"every": 1},
    }
    if role == "learner":
        cfg["swarm"]["identity_path"] = str(tmp / "learner.key")
        cfg["ingest"] = {"max_delay_steps": 0, "delay": {"kind": "fixed", "fixed_s": 0.3}}
    (tmp / "reward.py").write_text(REWARD)
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _wait(out: Path, child: Child, until, timeout: float, what: str) -> list[dict]:
    deadline = time.monotonic() + timeout
    while not until(rows := _rows(out)):
        assert child.poll() is None, f"{child.name} exited: {(out / 'node.log').read_text()[-2000:]}"
        assert time.monotonic() < deadline, f"{child.name}: {what} not within {timeout} s: {rows[-3:]}"
        time.sleep(0.5)
    return rows


def _fetched(row: dict) -> bool:
    """The round loaded weights whose bytes it fetched (a relabel loads none)."""
    return bool(row.get("weights_loaded") and row.get("weights_bytes"))


def _after_last_load(rows: list[dict], since: float) -> list[dict]:
    """The rows written after `since` that follow the last of them that loaded weights."""
    after = [m for m in rows if m["time"] > since]
    loads = [i for i, m in enumerate(after) if m.get("weights_loaded")]
    return after[loads[-1] + 1:] if loads else after


def test_learner_and_two_samplers(bootstrap, tmp_path):
    maddrs, children = bootstrap

    def start(name: str, config: str) -> tuple[Child, Path]:
        child = start_node(name, config, tmp_path / name, ["--initial-peers", *maddrs], env={"OMP_NUM_THREADS": "1"})
        children.append(child)
        return child, tmp_path / name

    learner_cfg = _config(tmp_path, "learner", "learner")
    learner, l_out = start("learner", learner_cfg)
    deadline = time.monotonic() + 120
    while "listening on" not in (log := (l_out / "node.log").read_text() if (l_out / "node.log").exists() else ""):
        assert time.monotonic() < deadline and learner.poll() is None, log[-2000:]
        time.sleep(0.5)
    learner_id = log.split(" peer ", 1)[1].split()[0]
    samplers = [start(f"s{i}", _config(tmp_path, f"s{i}", "sampler", follow=[learner_id])) for i in range(2)]

    # 1. versions advance with the learner's steps; stale records are dropped and counted
    l_rows = _wait(l_out, learner, lambda r: r and r[-1]["policy_version"] >= 5, 400, "5 learner steps")
    for child, out in samplers:
        # waited for: three rounds that loaded fetched bytes (a relabel has none). Not "three versions seen": a
        # sampler's rows start at its own initial version 0, so a sampler that first loaded v2 shows three
        # versions after its second load
        rows = _wait(out, child, lambda r: sum(_fetched(m) for m in r) >= 3, 300, "3 fetched versions loaded")
        versions = [m["policy_version"] for m in rows]
        assert versions == sorted(versions) and len({m["weights_version"] for m in rows if _fetched(m)}) >= 3, versions
        assert all(m["rows_trained"] == 0 and m["weights_learner"] in (None, learner_id) for m in rows)
    trained = [m for m in l_rows if m["rows_trained"]]
    assert trained and all(m["staleness_max"] == 0 for m in trained)  # max_delay_steps = 0
    assert all(m["delay_s_mean"] in (None, 0.3) for m in l_rows)
    l_rows = _wait(l_out, learner, lambda r: sum(m["drops"].get("stale_version", 0) for m in r) > 0, 300,
                   "a stale record dropped")
    assert not any(m["drops"].get("future_version") for m in l_rows)

    # 2. kill -9 of the learner: the samplers keep sampling with their last weights
    os.killpg(learner.proc.pid, signal.SIGKILL)
    learner.proc.wait()
    killed_at = time.time()
    held = {}
    for child, out in samplers:
        # weights already fetched or in flight at the kill may still land (at most one ready and one fetching);
        # after the last of them, 4 rounds on those weights with nothing loaded
        rows = _wait(out, child, lambda r: len(_after_last_load(r, killed_at)) >= 4, 120, "4 rounds after the kill")
        assert sum(bool(m.get("weights_loaded")) for m in rows if m["time"] > killed_at) <= 2, rows[-8:]
        after = _after_last_load(rows, killed_at)  # none of them loaded anything (a loading sampler never gets here)
        assert len({m["policy_version"] for m in after}) == 1, [m["policy_version"] for m in after]
        held[out] = after[-1]["policy_version"]
    last_version = l_rows[-1]["policy_version"]

    # 3. restarted: it resumes from its checkpoint and the samplers load its next version
    restarted_at = time.time()
    learner, _ = start("learner", learner_cfg)
    l_rows = _wait(l_out, learner, lambda r: any(m["time"] > restarted_at and m["rows_trained"] for m in r), 300,
                   "a step after the restart")
    assert "resumed from checkpoint" in (l_out / "node.log").read_text()
    resumed = [m for m in l_rows if m["time"] > restarted_at]
    assert resumed[0]["round"] > 0 and resumed[0]["policy_version"] >= last_version - 1, (resumed[0], last_version)
    for child, out in samplers:
        rows = _wait(out, child, lambda r: any(m["time"] > restarted_at and m["weights_loaded"]
                                               and m["weights_version"] > held[out] for m in r), 200,
                     "the restarted learner's next version")


def test_a_learner_without_a_swarm_is_one_line_and_exit_2(tmp_path):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "ops.cli", "node", "--config", "examples/heterorl/lab.yaml",
                          "--rounds", "1", "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 2, out.stderr[-2000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: role learner needs a swarm: set swarm.enabled or pass --initial-peers"]
    assert "Traceback" not in out.stderr
