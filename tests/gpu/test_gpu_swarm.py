"""Nodes on one CUDA GPU: the 2-node lab swarm exchanging and training for a few rounds, and a node whose
generation backend and training memory are chosen at start (`auto`), saying so in its first lines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from node.round.record import read_lines

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]


def _swarm(*args: str, timeout: int = 900) -> str:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "ops.cli", *args], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    return out


def test_two_lab_nodes_share_one_gpu(tmp_path):
    _swarm("local", "--nodes", "2", "--config", "examples/lab-swarm.yaml", "--rounds", "4", "--out", str(tmp_path),
           "--set", "train.device=cuda", "--set", "eval.every=0")
    for name in ("lab-0", "lab-1"):
        log = (tmp_path / name / "node.log").read_text()
        assert "on cuda:0" in log and "decode loop on cuda:0" in log and "CUDA graphs" in log, log[:2000]
        assert " · decode graphs · " in log, log[:2000]  # the first line: graphs, or eager and why
        rows = read_lines(tmp_path / name / "metrics.jsonl")
        assert all(m["decode"] == "graphs" for m in rows), [m["decode"] for m in rows]  # captured, not failed
        assert [m["round"] for m in rows] == [0, 1, 2, 3]
        assert all(m["rows_trained"] > 0 for m in rows)
        assert sum(m["groups_external"] for m in rows) > 0, name  # they exchanged


def test_a_node_chooses_its_backend_and_memory_at_start(tmp_path):
    out = _swarm("node", "--config", "examples/tiny-solo.yaml", "--rounds", "2", "--out", str(tmp_path / "run"),
                 "--set", "train.device=cuda", "--set", "train.autocast=bfloat16",
                 "--set", "generation.backend=auto", "--set", "train.micro_batch_rows=auto",
                 "--set", "train.gradient_checkpointing=auto")
    assert "generation backend " in out and "(vllm " in out, out[-2000:]  # vllm chosen, or why not
    assert "train: micro_batch_rows " in out and "gradient checkpointing o" in out, out[-2000:]
    rows = read_lines(tmp_path / "run" / "metrics.jsonl")
    assert [m["round"] for m in rows] == [0, 1] and all(m["rows_trained"] > 0 for m in rows)
