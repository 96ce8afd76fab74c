"""The GPU entry points on a machine without CUDA: `make test-gpu` and deploy/gpu_check.py stop at once with one
line (exit 2); `bench/speed/gpu.py --device cpu --model tiny` runs every scenario it can, each in its own process,
and writes the results schema; the GPU check's dry run records a failed scenario and still runs the rest;
`--quick` never writes gpu.json; the MFU's FLOPs and timing."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU: make test-gpu would run")
def test_make_test_gpu_stops_with_one_line_without_cuda():
    if shutil.which("make") is None:
        pytest.fail("make is not installed")
    proc = subprocess.run(["make", "--no-print-directory", "test-gpu", f"GPU_PY={sys.executable}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert proc.returncode == 2
    assert len(lines) == 1 and "test-gpu: no CUDA GPU visible to torch" in lines[0], lines


def test_gpu_check_stops_with_one_line_without_cuda(tmp_path):
    proc = subprocess.run([sys.executable, "deploy/gpu_check.py", "--out", str(tmp_path / "gc")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "no CUDA GPU visible to torch" in lines[0], lines
    assert not (tmp_path / "gc").exists()  # nothing was run


def _bench(*args: str, env: dict | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})


def test_bench_gpu_on_cpu_writes_the_schema(tmp_path):
    out = tmp_path / "gpu_cpu.json"
    proc = _bench("-m", "bench.speed.gpu", "--device", "cpu", "--model", "tiny", "--prompts", "2", "--group-size", "2",
                  "--max-new-tokens", "12", "--out", str(out), "--logs", str(tmp_path / "logs"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["device"] == "cpu" and result["model"] == "tiny" and result["not_ok"] == []
    names = [s["name"] for s in result["scenarios"]]
    assert names == ["full-bf16", "fp32-autocast", "lora", "hf-generate"] and result["skipped"] == ["vllm"]  # reference last
    fields = {"gen_tok_s", "train_tok_s", "mfu", "step_s", "round_s", "peak_gib", "decode", "wall_s"}
    for s in result["scenarios"]:
        assert s["status"] == "ok" and s["gen_tok_s"] > 0 and s["peak_gib"] > 0 and s["gen_ratio"] > 0
        assert (tmp_path / "logs" / f"{s['name']}.log").is_file()  # each in a process of its own, with its log
        if s["name"] != "hf-generate":
            assert fields <= s.keys() and s["mfu"] is None  # no peak FLOPs for a CPU
            assert s["decode"] == "eager: no CUDA"
            assert s["step_s"] > 0 and s["train_tok_s"] > 0 and s["round_s"] >= s["step_s"]
            assert s["micro_batch_rows"] >= 1 and s["is_weight_max"] == pytest.approx(1.0, abs=0.05)


def test_the_dry_run_records_a_failed_scenario_and_runs_the_rest(tmp_path):
    """deploy/gpu_check.py --dry-run on this CPU (the project already in this Python: --no-install; the offline
    install itself is exercised by tests/integration/test_offline_install.py): the GPU tests collected, one
    scenario made to fail (SWARM_BENCH_FAIL), the reference still run after it, the results and the logs'
    tarball written, bench/results untouched."""
    results = ROOT / "bench" / "results" / "speed"
    before = {p.name: p.stat().st_mtime for p in results.glob("gpu*.json")}
    gc = tmp_path / "gc"
    proc = _bench("deploy/gpu_check.py", "--dry-run", "--no-install", "--out", str(gc), "--scenarios", "full-bf16",
                  "hf-generate", env={"SWARM_BENCH_FAIL": "full-bf16"})
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # a scenario failed: not passed
    summary = json.loads((gc / "summary.json").read_text())
    assert {s["step"]: s["status"] for s in summary["steps"]} == {"tests": "ok", "bench": "failed"}
    assert summary["scenarios"] == {"full-bf16": "failed", "hf-generate": "ok"}
    rows = json.loads((gc / "gpu_dry.json").read_text())["scenarios"]
    assert rows[0]["error"] == "RuntimeError: SWARM_BENCH_FAIL=full-bf16: injected failure"
    assert re.search(r"\b1\d tests collected", (gc / "tests.log").read_text())  # imported: the install serves them
    with tarfile.open(gc / "gpu-check-logs.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"gc/summary.json", "gc/tests.log", "gc/bench.log", "gc/bench/full-bf16.log", "gc/gpu_dry.json"} <= names
    assert "injected failure" in (gc / "bench" / "full-bf16.log").read_text()  # its traceback, in its log
    assert {p.name: p.stat().st_mtime for p in results.glob("gpu*.json")} == before


def test_quick_never_writes_the_full_runs_record():
    from bench.speed.gpu import RESULTS, parse

    assert parse(["--quick", "--device", "cuda"]).out == RESULTS / "gpu_quick.json"
    assert parse(["--device", "cuda"]).out == RESULTS / "gpu.json"
    with pytest.raises(SystemExit):
        parse(["--quick", "--device", "cuda", "--out", str(RESULTS / "gpu.json")])


def test_step_flops_count_the_head_for_completion_tokens_only(tiny_qwen):
    from bench.speed.gpu_round import matmul_params, step_flops
    from node.round.logprobs import TokenRow
    from node.round.train import Row

    model, cfg = tiny_qwen.model, tiny_qwen.model.config
    rows = [Row(TokenRow([1] * 30, [2] * 10), [0.0] * 10, 0.0, True, 1.0, 0, False),
            Row(TokenRow([1] * 20, [2] * 20), [0.0] * 20, 0.0, True, -1.0, 0, False)]
    head, body = model.lm_head.weight.numel(), matmul_params(model) - model.lm_head.weight.numel()
    attention = 12 * cfg.num_hidden_layers * cfg.hidden_size * 40 * 80  # mean length 40, 80 tokens
    assert step_flops(model, False, rows) == 6 * body * 80 + 6 * head * 30 + attention
    assert step_flops(model, True, rows) == 4 * body * 80 + 4 * head * 30 + attention


def test_timed_synchronises_the_device_after_the_call(monkeypatch):
    import torch

    from bench.speed.gpu_round import timed

    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append("sync"))
    out, seconds = timed(lambda: calls.append("step") or 7, torch.device("cuda", 0))
    assert out == 7 and seconds >= 0 and calls == ["sync", "step", "sync"]  # the step's kernels counted
