"""Reproduce the learning test's measurement: does RL on the lab model raise its accuracy?

    python -m bench.learning_margin 0 1 2 3            # seeds as arguments, one JSON line each
    python -m bench.learning_margin 0 --rounds 20 --set train.lr=3e-5 --trace

For each seed, one node of examples/lab-solo.yaml (or --config) runs `--rounds` rounds and we
report, all on the lab model's own task:

  before / after   held-out accuracy (tasks.eval_size items, one sample each at the config's
                   temperature) of the warm start and of the final policy — the same items, so
                   `gain = after − before` is what the learning test asserts on
  early / late     mean rollout accuracy of rounds 0–4 and of the last 5 rounds (fresh items
                   each round, B·G completions per round): the same trend, measured in-loop
  greedy_*         optional (--greedy): held-out greedy accuracy before/after, for sharpening

Binomial noise of one accuracy on n items at p: √(p(1−p)/n); the spread across seeds printed in
the summary line is the number a margin must be judged against. --trace prints every round's
accuracy, grad norm, kl_beh (μ vs π_θ, ≈ 0 on-policy) and completion length to stderr.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time

import torch

from node.config import load_config
from node.node import Node
from node.runner import run

EARLY, LATE = 5, 5  # rounds averaged at each end of the in-loop trend


def parse_value(text: str):
    """`--set key=value` values: numbers (2e-4 included), booleans, null, lists as YAML reads them."""
    import yaml

    value = yaml.safe_load(text)
    if isinstance(value, str):  # YAML 1.1 reads "2e-4" as a string
        try:
            return float(value)
        except ValueError:
            return value
    return value


def greedy_accuracy(node: Node) -> float:
    """Held-out accuracy of the argmax policy (same items as node.evaluate())."""
    tok = node.tokenizer
    prompts = [node.prompt_of(t) for t in node._eval_set]
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    node.model.eval()
    with torch.no_grad():
        out = node.model.generate(**enc, do_sample=False, max_new_tokens=node.cfg.generation.max_new_tokens,
                                  pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    texts = tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    return sum(node.tasks.score(t, x) >= 1.0 for t, x in zip(node._eval_set, texts)) / len(texts)


def measure(seed: int, config: str, rounds: int, overrides: dict, *, greedy: bool, trace: bool) -> dict:
    """One seed's run; returns the JSON-able result line."""
    opts = {"seed": seed, "tasks.seed": seed, "rounds": rounds, "eval.every": rounds,
            "metrics.console": False, "checkpoint.every": rounds, "torch_threads": 1, **overrides}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as out_dir:
        node = Node(load_config(config, opts), out_dir)
        try:
            greedy_before = greedy_accuracy(node) if greedy else None
            rows = run(node, rounds)
            greedy_after = greedy_accuracy(node) if greedy else None
        finally:
            node.close()
    if trace:
        for m in rows:
            print(f"seed {seed} round {m['round']:3d} acc {m['accuracy']:.3f} "
                  f"grad {m.get('grad_norm', float('nan')):.3f} kl_beh {m.get('kl_beh', float('nan')):.2e} "
                  f"len {m['completion_len_mean']:.1f} groups {m['groups_local']}", file=sys.stderr)
    after = rows[-1]["eval_accuracy"]
    early = statistics.fmean(m["accuracy"] for m in rows[:EARLY])
    late = statistics.fmean(m["accuracy"] for m in rows[-LATE:])
    out = {"seed": seed, "rounds": rounds, "before": node.eval_before, "after": after,
           "gain": after - node.eval_before, "early": early, "late": late,
           "late_minus_before": late - node.eval_before,
           "eval_items": len(node._eval_set), "seconds": round(time.perf_counter() - started, 1),
           "overrides": overrides}
    if greedy:
        out.update(greedy_before=greedy_before, greedy_after=greedy_after)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("seeds", nargs="+", type=int)
    ap.add_argument("--config", default="examples/lab-solo.yaml")
    ap.add_argument("--rounds", type=int, default=None, help="default: the config's `rounds`")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="dotted config override, e.g. train.lr=3e-5 (repeatable)")
    ap.add_argument("--greedy", action="store_true", help="also measure held-out greedy accuracy")
    ap.add_argument("--trace", action="store_true", help="per-round metrics to stderr")
    args = ap.parse_args(argv)
    overrides = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            ap.error(f"--set needs KEY=VALUE, got {item!r}")
        overrides[key] = parse_value(value)
    rounds = args.rounds or load_config(args.config).rounds
    gains = []
    for seed in args.seeds:
        result = measure(seed, args.config, rounds, overrides, greedy=args.greedy, trace=args.trace)
        gains.append(result["gain"])
        print(json.dumps(result), flush=True)
    if len(gains) > 1:
        print(json.dumps({"summary": True, "seeds": args.seeds, "gain_mean": statistics.fmean(gains),
                          "gain_std": statistics.stdev(gains), "gain_min": min(gains)}), flush=True)


if __name__ == "__main__":
    main()
