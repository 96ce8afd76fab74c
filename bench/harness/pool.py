"""The resumable process-pool runner: every job in its own spawned process, each result appended to a JSONL
results file as it finishes, so an interrupted invocation resumes where it stopped (the caller skips the jobs
`output.load_jsonl` already holds)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


def _die_with_parent() -> None:
    """A worker gets SIGTERM when the runner dies (Linux prctl PR_SET_PDEATHSIG), so a killed runner leaves no
    worker computing on for hours; elsewhere nothing is done."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def run_jobs(fn, jobs: list, sink: Path, workers: int, describe) -> list[dict[str, Any]]:
    """Run `fn(job)` for every job in `workers` spawned processes; append each result to `sink` (JSONL) as it
    finishes, so an interrupted invocation resumes where it stopped, and print `describe(result)` with an ETA.
    The results, in the order they finished."""
    import concurrent.futures as cf
    import multiprocessing
    import sys

    sink.parent.mkdir(parents=True, exist_ok=True)
    out: list[dict[str, Any]] = []
    started = time.perf_counter()
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_die_with_parent) as pool, \
            sink.open("a") as fh:
        for k, fut in enumerate(cf.as_completed([pool.submit(fn, j) for j in jobs]), 1):
            r = fut.result()
            fh.write(json.dumps(r) + "\n")
            fh.flush()
            out.append(r)
            el = time.perf_counter() - started
            print(f"[{k}/{len(jobs)}] {describe(r)} — ETA {el / k * (len(jobs) - k) / 60:.0f} min",
                  file=sys.stderr, flush=True)
    return out
