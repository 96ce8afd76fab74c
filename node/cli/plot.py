"""`swarm plot`: reward, held-out accuracy and importance weights per round, one line per node."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from node.metrics import read_metrics  # noqa: E402


def _runs(dirs: list[Path]) -> dict[str, list[dict]]:
    runs = {}
    for d in dirs:
        files = [d / "metrics.jsonl"] if (d / "metrics.jsonl").is_file() else sorted(d.glob("*/metrics.jsonl"))
        if not files:
            raise FileNotFoundError(f"no metrics.jsonl in {d} or its subdirectories")
        for f in files:
            rows = read_metrics(f)
            if rows:
                runs[rows[0]["node"] if len(files) == 1 and len(dirs) == 1 else f"{f.parent.name}"] = rows
    return runs


def plot_runs(dirs: list[Path], out: Path) -> Path:
    runs = _runs(dirs)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for name, rows in runs.items():
        rounds = [m["round"] for m in rows]
        axes[0].plot(rounds, [m["reward_mean"] for m in rows], label=name, alpha=0.8)
        ev = [(m["round"], m["eval_accuracy"]) for m in rows if m.get("eval_accuracy") is not None]
        if rows[0].get("eval_accuracy_before") is not None:
            ev.insert(0, (-1, rows[0]["eval_accuracy_before"]))
        if ev:
            axes[1].plot(*zip(*ev), marker="o", label=name)
        axes[2].plot(rounds, [m.get("is_weight_max", float("nan")) for m in rows], label=name)
    for ax, title in zip(axes, ["mean reward (own groups)", "held-out accuracy", "max IS weight"]):
        ax.set_title(title)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
