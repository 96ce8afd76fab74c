"""Where a bench's numbers go: its family's results folder, the JSON file with the machine it ran on,
the text table it prints, the JSONL of a resumable run, and its figures.

Every bench script prints its numbers side by side in one run and writes them to
`bench/results/<family>/<name>.json`; nothing here times anything or asserts a target.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "results"
FAMILIES = ("learning", "exchange", "scale", "reliability", "speed")


def results_dir(family: str) -> Path:
    """bench/results/<family>/ (one of FAMILIES)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown bench family {family!r}")
    return RESULTS / family


def machine() -> dict[str, Any]:
    import torch

    return {"cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "platform": platform.platform(), "torch": torch.__version__,
            "cuda": torch.cuda.is_available(), "time": time.strftime("%Y-%m-%d %H:%M:%S")}


def write_json(name: str, payload: dict[str, Any], directory: Path) -> Path:
    """`directory/name.json`: {"bench": name, "machine": machine(), **payload}."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    path.write_text(json.dumps({"bench": name, "machine": machine(), **payload}, indent=2, sort_keys=False))
    return path


def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """A fixed-width text table (floats to 3 significant decimals)."""
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1e4 else f"{v:.0f}"
        return str(v)

    cells = [[fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(columns)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def load_jsonl(path: Path) -> list[dict[str, Any]]:
    """The runs a resumable bench appended to `path` so far (none when it does not exist)."""
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []


def pyplot():
    """matplotlib.pyplot on the Agg backend (a bench draws to files, never to a screen)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path, dpi: int = 110) -> Path:
    """Write `fig` to `path` (its folder made if needed) and close it."""
    import matplotlib.pyplot as plt

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return Path(path)
