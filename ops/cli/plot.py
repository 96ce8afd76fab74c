"""`swarm plot DIR... [--out PNG]`: the panels a researcher reads, one colour per node, several runs on one figure.

  reward            mean reward of the node's own completions: per round (thin) and EMA-smoothed
  accuracy          fraction of own completions with reward ≥ 1, the same way
  held-out accuracy one sampled completion per held-out item, ± one binomial standard error
                    √(p(1 − p)/n); round −1 is the evaluation before training
  loss              the training loss per optimizer step (raw and smoothed)
  KL to sampler     k3 estimate of KL(μ ‖ π_θ) on own (solid) and peers' (dashed) tokens
  groups            groups trained on per round: own (solid) and peers' (dashed)

Rounds are integers on every axis. By default the PNG goes into the first run dir (metrics.png).
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from node.round.record import RoundRecord, read_records  # noqa: E402
from ops.dashboard.runs import EMA, ema, run_files  # noqa: E402


Rows = list[RoundRecord]


def _runs(dirs: list[Path]) -> dict[str, Rows]:
    """label → round records (ops.dashboard.runs: one node's metrics.jsonl per dir, or one per node subdir)."""
    runs = {}
    files = run_files(dirs)
    for label, f in files:
        rows = read_records(f)
        if rows:
            runs[(rows[0].node or label) if len(files) == 1 and len(dirs) == 1 else label] = rows
    if not runs:
        raise FileNotFoundError(f"no metrics rows in {', '.join(map(str, dirs))}")
    return runs


def _series(rows: Rows, value) -> tuple[list[int], list[float]]:
    """(rounds, values) of `value(record)` where it is not None."""
    pts = [(m.round, float(v)) for m in rows if (v := value(m)) is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def _smoothed(ax, rows, value, color, label) -> None:
    x, y = _series(rows, value)
    if x:
        ax.plot(x, y, color=color, alpha=0.3, linewidth=1)
        ax.plot(x, ema(y), color=color, linewidth=2, label=label)


def _held_out(ax, rows, color, label) -> None:
    pts, first = [], rows[0].eval
    if first.eval_accuracy_before is not None:
        pts.append((-1, first.eval_accuracy_before, first.eval_size))
    pts += [(m.round, m.eval.eval_accuracy, m.eval.eval_size) for m in rows if m.eval.eval_accuracy is not None]
    if not pts:
        return
    x, p, n = zip(*pts)
    err = [math.sqrt(pi * (1 - pi) / ni) if ni else 0.0 for pi, ni in zip(p, n)]
    ax.errorbar(x, p, yerr=err, color=color, marker="o", capsize=3, label=label)


def plot_runs(dirs: list[Path], out: Path) -> Path:
    fig = figure(_runs(dirs))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def figure(runs: dict[str, Rows]):
    """The six panels (module docstring) for label → metrics rows."""
    colors = plt.get_cmap("tab10").colors
    fig, axes = plt.subplots(2, 3, figsize=(16, 8.5))
    (ax_rew, ax_acc, ax_eval), (ax_loss, ax_kl, ax_groups) = axes
    for k, (name, rows) in enumerate(runs.items()):
        c = colors[k % len(colors)]
        _smoothed(ax_rew, rows, lambda m: m.generation.reward_mean, c, name)
        _smoothed(ax_acc, rows, lambda m: m.generation.accuracy, c, name)
        _held_out(ax_eval, rows, c, name)
        _smoothed(ax_loss, rows, lambda m: m.metrics.loss, c, name)
        trained = [m for m in rows if m.trained]
        peers = [m for m in trained if m.step.groups_external]  # rounds that trained on peers' tokens
        for subset, value, style, who in ((trained, lambda m: m.metrics.kl_beh_local, "-", "own"),
                                          (peers, lambda m: m.metrics.kl_beh_external, "--", "peers")):
            x, y = _series(subset, value)
            if x:
                ax_kl.plot(x, y, style, color=c, marker=".", label=f"{name} ({who})")
        for value, style, who in ((lambda m: m.step.groups_local, "-", "own"),
                                  (lambda m: m.step.groups_external, "--", "peers")):
            x, y = _series(rows, value)
            if who == "own" or any(y):
                ax_groups.plot(x, y, style, color=c, marker=".", label=f"{name} ({who})")
    titles = [
        (ax_rew, f"mean reward, own completions (thin: per round, thick: EMA {EMA})"),
        (ax_acc, "accuracy (reward ≥ 1), own completions"),
        (ax_eval, "held-out accuracy ± 1 s.e. (round −1: before training)"),
        (ax_loss, "training loss"),
        (ax_kl, "KL(μ ‖ π_θ) estimate: own tokens (—), peers' (- -)"),
        (ax_groups, "groups trained per round: own (—), peers' (- -)"),
    ]
    for ax, title in titles:
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if ax is not ax_kl:  # no "1 + 1e-5" offset axes; KL keeps scientific notation for tiny values
            ax.ticklabel_format(axis="y", useOffset=False, style="plain")
        ax.grid(alpha=0.3)
    ax_groups.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax_groups.set_ylim(bottom=0)
    for ax in (ax_acc, ax_eval):
        ax.set_ylim(-0.02, 1.02)
    ax_rew.legend(fontsize=8, loc="best")
    for ax in (ax_kl, ax_groups):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig
