"""`train.micro_batch_rows: auto` and `train.gradient_checkpointing: auto` (node/round/sizing.py): the rules, the
measured plan keeping its promise on this CPU (torch.profiler's allocation events), and a node resolving both
once at start and saying so."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from node.config import parse_config
from node.models.device import checkpointing
from node.round.config import TrainConfig
from node.round.sizing import fits, needs_checkpointing, plan_memory, step_cost

ROOT = Path(__file__).resolve().parents[3]
MIB = 1 << 20
ROW, COMPLETION = 256, 224


def test_rules():
    assert fits(per_row=10 * MIB, fixed=100 * MIB, budget=200 * MIB, step_rows=64) == 10
    assert fits(per_row=10 * MIB, fixed=100 * MIB, budget=200 * MIB, step_rows=4) == 4  # never more than a step
    assert fits(per_row=10 * MIB, fixed=300 * MIB, budget=200 * MIB, step_rows=64) == 0
    auto = TrainConfig(micro_batch_rows="auto", gradient_checkpointing="auto")
    cost = dict(fixed=100 * MIB, budget=200 * MIB, step_rows=64)
    assert not needs_checkpointing(10 * MIB, cfg=auto, **cost)  # 10 rows fit: at least 8
    assert needs_checkpointing(20 * MIB, cfg=auto, **cost)  # 5 rows fit: fewer than 8
    assert not needs_checkpointing(20 * MIB, cfg=auto, fixed=100 * MIB, budget=200 * MIB, step_rows=4)  # a step is 4
    fixed_rows = TrainConfig(micro_batch_rows=6, gradient_checkpointing="auto")
    assert not needs_checkpointing(15 * MIB, cfg=fixed_rows, **cost)  # 6 fit
    assert needs_checkpointing(20 * MIB, cfg=fixed_rows, **cost)  # 5 fit, 6 asked
    assert needs_checkpointing(1, cfg=TrainConfig(gradient_checkpointing=True), **cost)  # as configured
    assert not needs_checkpointing(10**12, cfg=TrainConfig(gradient_checkpointing=False), **cost)


@pytest.fixture()
def model(tiny_llama):
    lm = copy.deepcopy(tiny_llama)
    return lm.model, lm.tokenizer.pad_token_id


def test_the_plan_keeps_its_promise(model):
    """Sized for a budget, the chosen micro-batch's measured peak stays within it, and is not far below it."""
    m, pad = model
    _, one_row = step_cost(m, 1, ROW, COMPLETION, pad)
    budget = 6 * one_row
    plan = plan_memory(m, TrainConfig(micro_batch_rows="auto"), row_tokens=ROW, completion_tokens=COMPLETION,
                       step_rows=1024, pad_id=pad, budget=budget)
    assert 2 < plan.micro_batch_rows < 1024 and not plan.checkpointing
    _, peak = step_cost(m, plan.micro_batch_rows, ROW, COMPLETION, pad)
    assert budget / 3 < peak <= budget


def test_checkpointing_only_when_the_micro_batch_would_not_fit(model):
    m, pad = model
    auto = TrainConfig(micro_batch_rows="auto", gradient_checkpointing="auto")
    kw = dict(row_tokens=ROW, completion_tokens=COMPLETION, step_rows=64, pad_id=pad)
    roomy = plan_memory(m, auto, budget=8 << 30, **kw)
    assert roomy.micro_batch_rows == 64 and not roomy.checkpointing and not checkpointing(m)
    _, one_row = step_cost(m, 1, ROW, COMPLETION, pad)
    tight = plan_memory(m, auto, budget=3 * one_row, **kw)  # fewer than 8 rows fit without it
    assert tight.checkpointing and checkpointing(m) and "checkpointed" in tight.why
    plain = plan_memory(m, TrainConfig(micro_batch_rows="auto", gradient_checkpointing=False), budget=3 * one_row, **kw)
    assert tight.micro_batch_rows > plain.micro_batch_rows  # checkpointing buys rows
    assert plan_memory(m, TrainConfig(micro_batch_rows=4), budget=1, **kw) is None  # nothing auto: nothing measured


@pytest.mark.parametrize("foreach", [False, True], ids=["per-tensor (CPU default)", "multi-tensor (CUDA default)"])
def test_the_budget_holds_adamws_first_step(model, foreach):
    """The planner sets aside `optimizer_bytes` for the optimizer: AdamW's first step, measured, allocates no more
    (its two moments were 2× the parameters; the multi-tensor step CUDA runs adds a third copy at its peak)."""
    import torch

    from node.round.sizing import measure, optimizer_bytes

    m, _ = model
    for p in m.parameters():
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(list(m.parameters()), lr=1e-3, foreach=foreach)
    _, peak = measure(opt.step, lambda: None, torch.device("cpu"))
    params = sum(p.numel() * p.element_size() for p in m.parameters())
    assert 2 * params < peak <= optimizer_bytes(m)


def test_a_node_resolves_auto_once_at_start_and_prints_it(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "ops.cli", "node", "--config", "examples/tiny-solo.yaml",
                           "--rounds", "1", "--out", str(tmp_path / "run"), "--set", "train.micro_batch_rows=auto",
                           "--set", "train.gradient_checkpointing=auto", "--set", "generation.backend=auto"],
                          cwd=ROOT, env=env, text=True, capture_output=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "[tiny-solo] generation backend hf (the policy is on cpu, not a GPU) · decode loop on cpu" in out
    first = next(x for x in out.splitlines() if x.startswith("[tiny-solo] model "))
    assert " · decode eager: no CUDA · " in first  # graphs or eager, and why: the first line and every metrics line
    metrics = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert metrics and all(m["decode"] == "eager: no CUDA" for m in metrics)
    line = next(x for x in out.splitlines() if x.startswith("[tiny-solo] train: micro_batch_rows "))
    assert "gradient checkpointing off" in line  # a tiny model fits: no recomputation
    cfg = parse_config({"model": {"spec": "tiny-qwen2"}, "tasks": {"datasets": [{"name": "chain_sum"}]},
                        "train": {"micro_batch_rows": "auto"}})
    assert cfg.train.micro_batch_rows == "auto"
