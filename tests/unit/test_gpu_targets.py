"""The GPU entry points on a machine without CUDA: `make test-gpu` stops at once with one line (exit 2), and
`bench/speed/gpu.py --device cpu --model tiny` runs every scenario it can and writes the results schema."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU: make test-gpu would run")
def test_make_test_gpu_stops_with_one_line_without_cuda():
    if shutil.which("make") is None:
        pytest.fail("make is not installed")
    proc = subprocess.run(["make", "--no-print-directory", "test-gpu", f"GPU_PY={sys.executable}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert proc.returncode == 2
    assert len(lines) == 1 and "test-gpu: no CUDA GPU visible to torch" in lines[0], lines


def test_bench_gpu_on_cpu_writes_the_schema(tmp_path):
    out = tmp_path / "gpu_cpu.json"
    proc = subprocess.run([sys.executable, "-m", "bench.speed.gpu", "--device", "cpu", "--model", "tiny", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["device"] == "cpu" and result["model"] == "tiny"
    names = [s["name"] for s in result["scenarios"]]
    assert names == ["hf-generate", "full-bf16", "fp32-autocast", "lora"] and result["skipped"] == ["vllm"]
    fields = {"gen_tok_s", "train_tok_s", "mfu", "step_s", "round_s", "peak_gib"}
    for s in result["scenarios"]:
        assert s["gen_tok_s"] > 0 and s["peak_gib"] > 0 and s["gen_ratio"] > 0
        if s["name"] != "hf-generate":
            assert fields <= s.keys() and s["mfu"] is None  # no peak FLOPs for a CPU
            assert s["step_s"] > 0 and s["train_tok_s"] > 0 and s["round_s"] >= s["step_s"]
            assert s["micro_batch_rows"] >= 1 and s["is_weight_max"] == pytest.approx(1.0, abs=0.05)
