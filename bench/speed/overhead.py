"""The framework's own overhead per round: node.round.loop.run_round vs raw generate + train_step.

Two solo nodes are built from the same config and seed (so they start from the same weights and
the same torch RNG state, each node keeping its own RNG state) and take turns, round by round, so
both see the same machine load:

  framework   node A: `run_round(node, r)` through bench.harness.rounds.play, timed from outside (tasks,
              generation, verification, records, selection, rows, train step, metrics line + JSONL fsync, everything)
  raw         node B: the same tasks, prompts and selection prepared *untimed*; only
              `generator.generate(prompts, n=G)` and `train_step(...)` are timed

overhead = (framework − raw) / framework, per round, median over the timed rounds (the first
round is a warm-up and is not counted). With identical seeds both nodes sample the same
completions; the table says whether they did (`same_samples`), since a different sample length
would change the generation time and not the overhead. Evaluation and checkpoints are off (they
are periodic, optional work, not per-round overhead). Target: overhead < 10 %.

    python -m bench.speed.overhead [--model lab-chain-sum] [--rounds 5] [--prompts 16] [--group-size 8]
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
from pathlib import Path

import torch

from bench.harness.models import CHAIN_SUM, model_cached, set_threads, system_prompt_for
from bench.harness.output import results_dir, table, write_json
from bench.harness.rounds import play
from node.config import parse_config
from node.node import Node
from node.round.groups import verify_group
from node.round.train import build_rows, train_step

RESULTS = results_dir("speed")


def node_config(spec: str, args) -> dict:
    return {
        "name": "overhead", "seed": args.seed, "rounds": 1_000_000, "torch_threads": args.threads,
        "model": {"spec": spec},
        "tasks": {"datasets": [{"name": "chain_sum", "config": CHAIN_SUM}],
                  "system_prompt": system_prompt_for(spec), "eval_size": 0},
        "generation": {"prompts_per_round": args.prompts, "group_size": args.group_size,
                       "max_new_tokens": args.max_new_tokens},
        "loss": {"name": "grpo", "norm": "token"},
        "train": {"lr": 5e-5, "micro_batch_rows": 128},
        "select": {"local_groups": args.prompts, "external_groups": 0, "drop_zero_advantage": False},
        "eval": {"every": 0, "at_start": False},
        "checkpoint": {"every": 1_000_000, "resume": False},
        "metrics": {"console": False},
    }


class Clocked:
    """One node and its own torch RNG state, so two nodes can take turns on one process RNG."""

    def __init__(self, cfg, out: Path):
        self.node = Node(cfg, out)  # seeds torch: both nodes start from the same weights and RNG
        self.node.log.stream = io.StringIO()
        self.rng = torch.get_rng_state()

    def turn(self, fn, r: int) -> dict:
        torch.set_rng_state(self.rng)
        try:
            return fn(self.node, r)
        finally:
            self.rng = torch.get_rng_state()


def framework_round(node: Node, r: int) -> dict:
    (played,) = play(node, [r])
    rec, g = played.record, node.cfg.generation
    return {"wall_s": played.wall_s, "gen_s": rec.generation.gen_s, "step_s": rec.step.step_s,
            "reward_mean": rec.generation.reward_mean,
            "tokens": round(rec.generation.completion_len_mean * g.prompts_per_round * g.group_size)}


def raw_round(node: Node, r: int) -> dict:
    """The same round with only generate and train_step under the clock."""
    cfg, g = node.cfg, node.cfg.generation
    tasks = node.tasks.sample(r, g.prompts_per_round)
    prompts = [node.prompt_of(t) for t in tasks]
    t0 = time.perf_counter()
    gen = node.generator.generate(prompts, n=g.group_size)
    gen_s = time.perf_counter() - t0
    local = [verify_group(node.tasks, t, c, mode=cfg.train.advantage, round=r, policy_version=node.policy_version)
             for t, c in zip(tasks, gen.groups)]
    selection = node.selector.select(local)
    train_rows = build_rows(selection.groups, node.tokenizer, node.prompt_of)
    t1 = time.perf_counter()
    step = train_step(node.model, node.optimizer, train_rows, node.loss_fn, cfg.train,
                      temperature=g.temperature, pad_id=node.tokenizer.pad_token_id)
    step_s = time.perf_counter() - t1
    if step.stepped:
        node.policy_version += 1
        node.generator.sync_weights(node.model, node.policy_version)
    rewards = [x for grp in local for x in grp.rewards]
    return {"gen_s": gen_s, "step_s": step_s, "reward_mean": statistics.fmean(rewards), "tokens": gen.new_tokens}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="lab-chain-sum", help="falls back to tiny-qwen2 when not cached")
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds (after one warm-up round)")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    set_threads(args.threads)
    spec = args.model if model_cached(args.model) else "tiny-qwen2"
    cfg = parse_config(node_config(spec, args), "bench.speed.overhead")

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        framework, raw = Clocked(cfg, Path(tmp) / "framework"), Clocked(cfg, Path(tmp) / "raw")
        for r in range(args.rounds + 1):  # taking turns: both see the same machine load
            a, b = framework.turn(framework_round, r), raw.turn(raw_round, r)
            if r == 0:
                continue  # warm-up
            raw_s = b["gen_s"] + b["step_s"]
            rows.append({"round": r, "framework_s": a["wall_s"], "raw_s": raw_s,
                         "overhead": (a["wall_s"] - raw_s) / a["wall_s"],
                         "in_round_overhead": (a["wall_s"] - a["gen_s"] - a["step_s"]) / a["wall_s"],
                         "same_samples": a["tokens"] == b["tokens"] and a["reward_mean"] == b["reward_mean"]})
    summary = {"model": spec, "framework_s": statistics.median(r["framework_s"] for r in rows),
               "raw_s": statistics.median(r["raw_s"] for r in rows),
               "overhead": statistics.median(r["overhead"] for r in rows),
               "in_round_overhead": statistics.median(r["in_round_overhead"] for r in rows),
               "target": 0.10, "all_same_samples": all(r["same_samples"] for r in rows)}
    print(f"== {spec}: {args.prompts} prompts × G={args.group_size}, max_new_tokens {args.max_new_tokens}, "
          f"{args.threads} threads, {args.rounds} timed rounds")
    print(table(rows, ["round", "framework_s", "raw_s", "overhead", "in_round_overhead", "same_samples"]))
    print("\nmedian: " + table([summary], list(summary)))
    path = write_json("overhead", {"args": vars(args), "rounds": rows, "summary": summary}, RESULTS)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
