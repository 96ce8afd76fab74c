"""`swarm plot`: the panels, integer round axes, error bars, the default output path, several runs compared."""

from __future__ import annotations

import json
import math

import matplotlib.pyplot as plt
import pytest

from ops.cli.main import main
from ops.cli.plot import _runs, ema, figure


def _write_run(d, node: str, rounds: int = 12, eval_every: int = 4, peers: bool = True) -> None:
    d.mkdir(parents=True)
    lines = []
    for r in range(rounds):
        lines.append({
            "node": node, "round": r, "reward_mean": 0.1 + 0.02 * r, "accuracy": 0.1 + 0.02 * r,
            "eval_accuracy": 0.2 + 0.01 * r if (r + 1) % eval_every == 0 else None,
            "eval_accuracy_before": 0.15 if r == 0 else None, "eval_size": 64,
            "groups_local": 4, "groups_external": 3 if peers else 0, "rows_trained": 56, "loss": -0.01 * r,
            "kl_beh_local": 1e-7, "kl_beh_external": 0.02 if peers else 0.0, "is_weight_max": 1.00001,
        })
    (d / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))


def test_six_panels_with_integer_rounds_and_error_bars(tmp_path):
    _write_run(tmp_path / "a" / "lab-0", "lab-0")
    _write_run(tmp_path / "a" / "lab-1", "lab-1")
    fig = figure(_runs([tmp_path / "a"]))
    try:
        axes = fig.axes
        titles = [ax.get_title() for ax in axes]
        for word in ("reward", "accuracy", "held-out", "loss", "KL", "groups"):
            assert any(word in t for t in titles), (word, titles)
        assert not any("IS" in t for t in titles)
        fig.canvas.draw()
        for ax in axes:
            ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
            assert all(float(t).is_integer() for t in ticks), (ax.get_title(), ticks)
        held_out = axes[2]
        assert len(held_out.containers) == 2  # one errorbar per node
        (x, y), = [line.get_data() for line in held_out.containers[0].lines[:1]]
        assert list(x) == [-1, 3, 7, 11]  # before training, then every 4 rounds
        segments = held_out.containers[0].lines[2][0].get_segments()
        assert segments[0][1][1] - segments[0][0][1] == pytest.approx(2 * math.sqrt(0.15 * 0.85 / 64))
        labels = axes[0].get_legend_handles_labels()[1]
        assert labels == ["lab-0", "lab-1"]
        assert {"lab-0 (own)", "lab-0 (peers)"} <= set(axes[5].get_legend_handles_labels()[1])
    finally:
        plt.close(fig)


def test_default_output_goes_into_the_run_dir_and_several_runs_share_a_figure(tmp_path, capsys):
    _write_run(tmp_path / "solo", "solo", peers=False)
    _write_run(tmp_path / "swarm" / "n-0", "n-0")
    _write_run(tmp_path / "swarm" / "n-1", "n-1")
    assert main(["plot", str(tmp_path / "solo")]) == 0
    assert (tmp_path / "solo" / "metrics.png").stat().st_size > 10_000
    assert capsys.readouterr().out.strip() == str(tmp_path / "solo" / "metrics.png")
    runs = _runs([tmp_path / "solo", tmp_path / "swarm"])
    assert list(runs) == ["solo", "swarm/n-0", "swarm/n-1"]
    assert main(["plot", str(tmp_path / "solo"), str(tmp_path / "swarm"), "--out", str(tmp_path / "cmp.png")]) == 0
    assert (tmp_path / "cmp.png").is_file()
    assert main(["plot", str(tmp_path / "nothing")]) == 2


def test_ema_is_debiased_and_skips_gaps():
    assert ema([1.0, 1.0, 1.0]) == pytest.approx([1.0, 1.0, 1.0])
    assert ema([0.0, 1.0], 0.5) == pytest.approx([0.0, 2 / 3])
    assert ema([float("nan"), 2.0])[1] == pytest.approx(2.0)
