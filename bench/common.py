"""Helpers shared by the bench scripts: model availability, each lab model's task, JSON results, tables.

Every bench script prints its numbers side by side in one run and writes them to
`bench/results/<name>.json`; nothing here times anything or asserts a target.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from node.models.load import default_cache_dir  # noqa: E402
from node.tasks.config import DatasetSpec, TaskConfig  # noqa: E402
from node.tasks.source import TaskSource  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
# The lab model's own task (node/models/lab.py recipe): easy two-term sums.
CHAIN_SUM = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}
# lab-spell's own task (its recipe): reverse a 3–6 letter word.
SPELL = {"min_word_len": 3, "max_word_len": 6}


def model_cached(alias: str) -> bool:
    """True when a built-in alias is already in the cache (so a bench run never triggers a build)."""
    models = default_cache_dir() / "models"
    return any(p.is_dir() and p.name.startswith(f"{alias}-v") for p in models.glob(f"{alias}-v*"))


def system_prompt_for(spec: str) -> str | None:
    """lab-* models were warm-started without a system prompt; real LMs get reasoning-gym's default."""
    return None if spec.startswith("lab-") or spec.startswith("tiny-") else "default"


def task_source(spec: str, seed: int = 0) -> TaskSource:
    """The model's own task: spell_backward for lab-spell, easy chain_sum otherwise."""
    data = DatasetSpec(name="spell_backward", config=SPELL) if spec == "lab-spell" else \
        DatasetSpec(name="chain_sum", config=CHAIN_SUM)
    return TaskSource(TaskConfig(datasets=[data], seed=seed, system_prompt=system_prompt_for(spec), eval_size=0))


T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
         20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048,
         29: 2.045, 30: 2.042}


def interval(xs: list[float]) -> tuple[float, float]:
    """(mean, half-width of the 95 % t-interval); half-width 0 for a single value."""
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, 0.0
    return m, T_975.get(len(xs) - 1, 1.96) * statistics.stdev(xs) / len(xs) ** 0.5


def set_threads(n: int) -> None:
    torch.set_num_threads(n)


def machine() -> dict[str, Any]:
    return {"cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "platform": platform.platform(), "torch": torch.__version__,
            "cuda": torch.cuda.is_available(), "time": time.strftime("%Y-%m-%d %H:%M:%S")}


def write_json(name: str, payload: dict[str, Any], directory: Path = RESULTS) -> Path:
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


def run_jobs(fn, jobs: list, sink: Path, workers: int, describe) -> list[dict[str, Any]]:
    """Run `fn(job)` for every job in `workers` spawned processes; append each result to `sink` (JSONL) as it
    finishes, so an interrupted invocation resumes where it stopped, and print `describe(result)` with an ETA.
    The results, in the order they finished."""
    import concurrent.futures as cf
    import multiprocessing
    import sys

    RESULTS.mkdir(parents=True, exist_ok=True)
    out: list[dict[str, Any]] = []
    started = time.perf_counter()
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool, sink.open("a") as fh:
        for k, fut in enumerate(cf.as_completed([pool.submit(fn, j) for j in jobs]), 1):
            r = fut.result()
            fh.write(json.dumps(r) + "\n")
            fh.flush()
            out.append(r)
            el = time.perf_counter() - started
            print(f"[{k}/{len(jobs)}] {describe(r)} — ETA {el / k * (len(jobs) - k) / 60:.0f} min",
                  file=sys.stderr, flush=True)
    return out
