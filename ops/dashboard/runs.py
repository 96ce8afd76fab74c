"""Run dirs as `swarm plot` and `swarm dashboard` read them: which metrics.jsonl belongs to which label.

A dir holds one node's `metrics.jsonl`, or one per node subdir (`swarm local`). With one dir the
label is the node's name (its subdir); with several, the dir's name comes first (`a/lab-0`).
"""

from __future__ import annotations

import math
from pathlib import Path

EMA = 0.8  # weight of the past in the smoothed lines (TensorBoard's smoothing, debiased)


def run_files(dirs: list[Path]) -> list[tuple[str, Path]]:
    """(label, metrics.jsonl path) per node; FileNotFoundError when a dir holds none."""
    out = []
    for d in dirs:
        if not Path(d).is_dir():
            raise FileNotFoundError(f"no run dir {d}")
        files = [d / "metrics.jsonl"] if (d / "metrics.jsonl").is_file() else sorted(d.glob("*/metrics.jsonl"))
        if not files:
            raise FileNotFoundError(f"no metrics.jsonl in {d} or its subdirectories")
        for f in files:
            if len(dirs) == 1:
                label = f.parent.name
            else:
                label = d.name if len(files) == 1 else f"{d.name}/{f.parent.name}"
            out.append((label, f))
    return out


def ema(values: list[float | None], weight: float = EMA) -> list[float]:
    """Debiased exponential moving average (None and NaN are skipped, not propagated)."""
    out, acc, norm = [], 0.0, 0.0
    for v in values:
        if v is not None and not math.isnan(v):
            acc, norm = weight * acc + (1 - weight) * v, weight * norm + (1 - weight)
        out.append(acc / norm if norm else float("nan"))
    return out
