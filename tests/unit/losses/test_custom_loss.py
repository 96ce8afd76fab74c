"""A loss of your own by import path: config, contract checks, micro-batch sums, 3 rounds of training.

The training test also turns on TensorBoard and reads the event files back with tensorboard's
own EventAccumulator.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from losses import CustomLossConfig, build_loss, parse_loss_config
from losses.base import BatchTotals
from losses.plugin import PluginError
from node.config import ConfigError, parse_config
from tests.unit.losses.test_losses_values import make_inputs

EXAMPLE = str(Path(__file__).resolve().parents[3] / "examples" / "custom_loss.py") + ":truncated_pg"


def test_a_name_with_a_colon_is_an_import_path_and_other_keys_are_kwargs():
    cfg = parse_loss_config(EXAMPLE, clip=3.0)
    assert isinstance(cfg, CustomLossConfig) and cfg.kwargs == {"clip": 3.0}
    node = parse_config({"model": {"spec": "tiny-qwen2"}, "tasks": {"datasets": [{"name": "chain_sum"}]},
                         "loss": {"name": "mypkg.losses:my_loss", "beta": 0.1}})
    assert isinstance(node.loss, CustomLossConfig) and node.loss.kwargs == {"beta": 0.1}
    with pytest.raises(ConfigError, match="loss.grpo.eps_low"):  # built-in names keep their error paths
        parse_config({"model": {"spec": "x"}, "tasks": {"datasets": [{"name": "chain_sum"}]},
                      "loss": {"name": "grpo", "eps_low": 5}})
    with pytest.raises(ValueError, match="module:function"):
        parse_loss_config("no_such_loss")


def test_contract_errors_are_clear(tmp_path):
    with pytest.raises(PluginError, match="does not take these arguments"):
        build_loss(EXAMPLE, clipp=3.0)
    with pytest.raises(PluginError, match="cannot import no_such_pkg"):
        build_loss("no_such_pkg.losses:fn")
    (tmp_path / "bad.py").write_text("def loss(inputs):\n    return inputs.logp.sum()\n")
    fn = build_loss(f"{tmp_path / 'bad.py'}:loss")
    with pytest.raises(TypeError, match="not losses.LossOutputs"):
        fn(_inputs())


def _inputs():
    """B = 3 rows, T = 4 (lengths 4, 2, 3), the sampler μ off-policy by known ratios."""
    logp = [[-1.0, -0.5, -2.0, -0.1], [-0.3, -1.2, 0.0, 0.0], [-0.7, -0.2, -1.5, 0.0]]
    ratio = [[1.0, 3.0, 0.5, 1.5], [2.5, 1.0, 1.0, 1.0], [0.8, 1.2, 4.0, 1.0]]
    mask = [[1.0] * 4, [1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]]
    beh = [[lp - math.log(r) for lp, r in zip(lr, rr)] for lr, rr in zip(logp, ratio)]
    return make_inputs(logp, beh, mask, [1.0, -0.5, 2.0], group_ids=[0, 0, 1])


def test_example_value_and_micro_batches_add_up_to_the_full_batch():
    fn = build_loss(EXAMPLE, clip=2.0)
    full = _inputs()
    out = fn(full)
    # Σ_{i,t} −min(r, 2)·A_i·log π / K, K = 9 tokens
    w = [[1.0, 2.0, 0.5, 1.5], [2.0, 1.0], [0.8, 1.2, 2.0]]
    lp = [[-1.0, -0.5, -2.0, -0.1], [-0.3, -1.2], [-0.7, -0.2, -1.5]]
    adv = [1.0, -0.5, 2.0]
    expected = sum(-wi * a * li for ws, ls, a in zip(w, lp, adv) for wi, li in zip(ws, ls)) / 9
    assert out.loss.item() == pytest.approx(expected, rel=1e-6)
    assert out.metrics["clip_frac"] == pytest.approx(3 / 9) and out.metrics["tokens"] == 9
    out.loss.backward()
    # split rows {0, 1} and {2}: each part divides by the whole step's totals
    totals = BatchTotals(rows=3, tokens=9, max_len=4)
    parts = []
    for rows in ([0, 1], [2]):
        sub = _inputs()
        part = dataclasses.replace(sub, **{f.name: getattr(sub, f.name)[rows] for f in dataclasses.fields(sub)
                                          if isinstance(getattr(sub, f.name), torch.Tensor)}, totals=totals)
        part.logp.retain_grad()
        fn(part).loss.backward()
        parts.append((part, sub))
    summed = sum(fn(p).loss.item() for p, _ in parts)
    assert summed == pytest.approx(out.loss.item(), rel=1e-6)
    assert_close(torch.cat([p.logp.grad for p, _ in parts]), full.logp.grad)


def test_a_node_trains_three_rounds_with_the_custom_loss_and_writes_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from node.node import Node
    from node.runner import run

    # a reward that a random model earns unevenly (completion length), so advantages are nonzero
    (tmp_path / "length.py").write_text("def length(prompts, completions, **kw):\n"
                                        "    return [len(c) / 10 for c in completions]\n")
    data = Path(__file__).resolve().parents[3] / "examples" / "byo" / "arithmetic.jsonl"
    cfg = parse_config({
        "name": "custom", "rounds": 3, "torch_threads": 1, "model": {"spec": "tiny-qwen2"},
        "tasks": {"datasets": [{"file": str(data), "reward": f"{tmp_path / 'length.py'}:length"}],
                  "system_prompt": None, "eval_size": 0},
        "generation": {"prompts_per_round": 2, "group_size": 4, "max_new_tokens": 8},
        "loss": {"name": EXAMPLE, "clip": 2.0}, "train": {"lr": 1e-3},
        "select": {"local_groups": 2, "external_groups": 0, "drop_zero_advantage": False},
        "eval": {"every": 0}, "checkpoint": {"every": 100},
        "metrics": {"console": False, "report_to": ["tensorboard"]},
    })
    node = Node(cfg, tmp_path / "run")
    before = [p.detach().clone() for p in node.model.parameters()]
    try:
        rows = [r.line() for r in run(node, 3)]
    finally:
        node.close()
    assert [m["policy_version"] for m in rows] == [1, 2, 3]
    assert all(m["rows_trained"] == 8 and math.isfinite(m["loss"]) for m in rows)
    assert all(m["grad_norm"] > 0 for m in rows)
    assert any((a != b).any() for a, b in zip(before, node.model.parameters()))

    acc = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert {"reward_mean", "loss", "kl_beh", "groups_local", "rows_trained"} <= set(tags)
    events = acc.Scalars("loss")
    assert [e.step for e in events] == [0, 1, 2]
    assert [e.value for e in events] == pytest.approx([m["loss"] for m in rows], rel=1e-6)
    assert [e.value for e in acc.Scalars("reward_mean")] == pytest.approx([m["reward_mean"] for m in rows])
