"""Does RL on the lab model raise its held-out accuracy? Trained vs frozen, same task stream, paired.

    python -m bench.learning.learning_margin 0 1 2 3 4 5 6 7          # seeds; one JSON line per seed + a summary
    python -m bench.learning.learning_margin 0 --rounds 20 --set train.lr=2e-4 --trace

For each seed, one node of examples/lab-solo.yaml (or --config) runs `--rounds` rounds twice with one
torch thread, through the project's own round code (node.runner.run):

  trained   the config as written
  frozen    the same with train.lr = 0 (the control): the same seed, so the same task stream, the same
            held-out items and the same generation settings; only the weights never move

Held-out measure (node.evaluate_items): tasks.eval_size items from the held-out block of the task
streams (never trained on), eval.samples completions each at the generation temperature, an item
scoring the fraction of fully correct completions. `before` is the evaluation before round 0 and
`after` the one after the last round, on the same items, so each item gives a paired difference
d_i = after_i − before_i:

  gain = mean(d),  se = stdev(d) / √N        (per run; the frozen gain is pure sampling noise)
  effect = gain(trained) − gain(frozen)       (per seed: what training adds on the same stream)

The summary line gives the effect's mean over seeds, its standard deviation and a 95 % t-interval
(Student t, n − 1 degrees of freedom): the number a learning claim or a test margin rests on.
--trace prints every round's rollout accuracy, reward, grad norm and completion length to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time

from bench.harness.options import parse_value
from bench.harness.stats import summary
from node.books.progress import Progress
from node.config import load_config
from node.node import Node
from node.runner import run


def run_once(seed: int, config: str, rounds: int, overrides: dict, *, trace: bool = False) -> dict:
    """One node run; held-out accuracy before and after with the paired gain and its standard error."""
    opts = {"seed": seed, "tasks.seed": seed, "rounds": rounds, "eval.every": rounds, "eval.at_start": True,
            "metrics.console": False, "checkpoint.every": rounds, "torch_threads": 1, **overrides}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as out_dir:
        node = Node(load_config(config, opts), out_dir)
        try:
            rows = run(node, rounds)
            before, after = node.eval_before_items.per_item, node.last_eval.per_item
        finally:
            node.close()
    if trace:
        for m in rows:
            grad = m.metrics.grad_norm if m.metrics.grad_norm is not None else float("nan")
            print(f"seed {seed} lr {opts.get('train.lr', 'cfg')} round {m.round:3d} acc {m.generation.accuracy:.3f} "
                  f"reward {m.generation.reward_mean:.3f} grad {grad:.3f} "
                  f"len {m.generation.completion_len_mean:.1f}", file=sys.stderr)
    d = [a - b for a, b in zip(after, before)]
    return {"before": statistics.fmean(before), "after": statistics.fmean(after), "gain": statistics.fmean(d),
            "se": statistics.stdev(d) / math.sqrt(len(d)), "items": len(d),
            "rollout_first": statistics.fmean(m.generation.accuracy for m in rows[:5]),
            "rollout_last": statistics.fmean(m.generation.accuracy for m in rows[-5:]),
            "round_s": statistics.median(m.round_s for m in rows), "seconds": round(time.perf_counter() - started, 1)}


def measure(seed: int, config: str, rounds: int, overrides: dict, *, trace: bool = False) -> dict:
    """Trained and frozen (train.lr = 0) runs of one seed on the same task stream."""
    trained = run_once(seed, config, rounds, overrides, trace=trace)
    frozen = run_once(seed, config, rounds, {**overrides, "train.lr": 0.0}, trace=trace)
    return {"seed": seed, "rounds": rounds, "config": config, "overrides": overrides,
            "trained": trained, "frozen": frozen, "effect": trained["gain"] - frozen["gain"],
            "effect_se": math.hypot(trained["se"], frozen["se"])}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("seeds", nargs="+", type=int)
    ap.add_argument("--config", default="examples/lab-solo.yaml")
    ap.add_argument("--rounds", type=int, default=None, help="default: the config's `rounds`")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="dotted config override, e.g. train.lr=2e-4 (repeatable)")
    ap.add_argument("--trace", action="store_true", help="per-round metrics to stderr")
    args = ap.parse_args(argv)
    overrides = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            ap.error(f"--set needs KEY=VALUE, got {item!r}")
        overrides[key] = parse_value(value)
    rounds = args.rounds or load_config(args.config).rounds
    results = []
    bar = Progress("bench.learning.learning_margin", total=len(args.seeds), unit="seeds", every_s=0)  # k/N, ETA on stderr
    for seed in args.seeds:
        result = measure(seed, args.config, rounds, overrides, trace=args.trace)
        results.append(result)
        bar.advance()
        t, f = result["trained"], result["frozen"]
        print(json.dumps(result), flush=True)
        print(f"seed {seed}: trained {t['before']:.3f} → {t['after']:.3f} ({t['gain']:+.3f} ± {t['se']:.3f}), "
              f"frozen {f['before']:.3f} → {f['after']:.3f} ({f['gain']:+.3f} ± {f['se']:.3f}), "
              f"effect {result['effect']:+.3f}", file=sys.stderr, flush=True)
    bar.close()
    line = {"summary": True, "seeds": args.seeds, "rounds": rounds, "overrides": overrides,
               "effect": summary([r["effect"] for r in results]),
               "trained_gain": summary([r["trained"]["gain"] for r in results]),
               "frozen_gain": summary([r["frozen"]["gain"] for r in results])}
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
