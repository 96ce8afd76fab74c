"""The demo over several seeds: `swarm local --nodes N --config FILE --control`, exactly as `make demo` runs it.

Seed s runs the config with `seed: s` and `tasks.seed: 1000·s` (swarm local gives node i seed s + i and
task stream 1000·s + i; the solo control gets node 0's). Per seed: each node's held-out gain (after −
before, from its metrics.jsonl) and node 0's gain minus the control's — the same seed, task stream,
generation and held-out items, so the difference is paired. Reported: the mean over seeds with a 95 %
t-interval and how many seeds were positive; bench/results/learning/demo_seeds<tag>.json.

    python -m bench.learning.demo_seeds --seeds 0 1 2 3 4 5 6 7        # ≈ 2–4 min a seed on 2 cores
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench.harness.output import results_dir, table, write_json
from bench.harness.stats import interval
from node.books.progress import Progress
from node.round.record import read_records

RESULTS = results_dir("learning")


def gains(run: Path) -> dict[str, float]:
    """node → held-out gain (the first evaluation before round 0, the last one after)."""
    out = {}
    for d in sorted(p for p in run.iterdir() if (p / "metrics.jsonl").is_file()):
        rows = read_records(d / "metrics.jsonl")
        evals = [m.eval.eval_accuracy for m in rows if m.eval.eval_accuracy is not None]
        if rows and rows[0].eval.eval_accuracy_before is not None and evals:
            out[d.name] = evals[-1] - rows[0].eval.eval_accuracy_before
    return out


def run_seed(config: str, nodes: int, seed: int, rounds: int | None) -> dict:
    cfg = yaml.safe_load(Path(config).read_text())
    cfg["seed"] = seed
    cfg.setdefault("tasks", {})["seed"] = 1000 * seed
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / Path(config).name
        path.write_text(yaml.safe_dump(cfg))
        started = time.perf_counter()
        cmd = [sys.executable, "-m", "ops.cli", "local", "--nodes", str(nodes), "--config", str(path),
               "--out", f"{tmp}/run", "--control"] + (["--rounds", str(rounds)] if rounds else [])
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        if proc.returncode != 0:
            raise SystemExit(f"seed {seed}: swarm local exited {proc.returncode}:\n{proc.stdout[-2000:]}")
        g = gains(Path(tmp) / "run")
    name = cfg["name"]
    swarm = [g[f"{name}-{i}"] for i in range(nodes)]
    return {"seed": seed, "seconds": round(time.perf_counter() - started, 1), "gains": g,
            "node0_minus_solo": swarm[0] - g[f"{name}-solo"],
            "swarm_mean_minus_solo": sum(swarm) / nodes - g[f"{name}-solo"]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="examples/lab-swarm.yaml")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--seeds", nargs="+", type=int, default=list(range(8)))
    ap.add_argument("--rounds", type=int, help="override the config's rounds")
    ap.add_argument("--tag", default="")
    args = ap.parse_args(argv)
    runs = []
    bar = Progress("bench.learning.demo_seeds", total=len(args.seeds), unit="seeds", every_s=0)  # k/N, ETA on stderr
    for k, seed in enumerate(args.seeds, 1):
        r = run_seed(args.config, args.nodes, seed, args.rounds)
        runs.append(r)
        bar.advance()
        print(f"[{k}/{len(args.seeds)}] seed {seed}: " + " ".join(f"{n} {v:+.3f}" for n, v in r["gains"].items())
              + f" · node 0 − solo {r['node0_minus_solo']:+.3f} ({r['seconds']:.0f} s)", file=sys.stderr, flush=True)
    bar.close()
    summary = {}
    for key in ("node0_minus_solo", "swarm_mean_minus_solo"):
        xs = [r[key] for r in runs]
        m, ci = interval(xs)
        summary[key] = {"mean": m, "ci95": ci, "positive": sum(x > 0 for x in xs), "seeds": len(xs)}
    for name in runs[0]["gains"]:
        m, ci = interval([r["gains"][name] for r in runs])
        summary[f"gain {name}"] = {"mean": m, "ci95": ci, "seeds": len(runs)}
    print(table([{"quantity": k, **v} for k, v in summary.items()], ["quantity", "mean", "ci95", "positive", "seeds"]))
    write_json(f"demo_seeds{args.tag}", {"args": vars(args), "summary": summary, "runs": runs}, RESULTS)


if __name__ == "__main__":
    main()
