"""Tokens/s of the HF generator: one batched call vs one prompt at a time vs one sequence at a time.

The same B chain_sum prompts, G completions each, through node.generation.hf.HFGenerator:

  batched        generate(all B prompts, n=G): B·G sequences in one `generate` call (docs/ARCHITECTURE.md §2 step 2)
  per_prompt     generate([p], n=G) for each prompt: G sequences per call
  per_sequence   generate([p], n=1) G times for each prompt: one sequence per call

tokens/s counts *useful* tokens (each completion up to and including its EOS); padding a batched
call spends on finished sequences is not counted, so the ratio is what a round actually gains.
The one-sequence mode is slow, so by default it runs on the first `--sequential-prompts` prompts
only (a rate does not depend on how many prompts it is measured on; say so when quoting it).
A warm-up call precedes the timings. Target: batched ≥ 4× one-at-a-time.

    python -m bench.speed.generation_batching [--models smollm2-135m lab-chain-sum] [--prompts 16]
                                        [--group-size 8] [--max-new-tokens 32] [--sequential-prompts 2]
"""

from __future__ import annotations

import argparse

import torch

from bench.harness.models import cached_models, set_threads, task_source
from bench.harness.output import results_dir, table, write_json
from node.generation.config import GenerationConfig
from node.generation.hf import HFGenerator
from node.models.config import ModelConfig
from node.models.load import load_model
from node.tasks.source import render_prompt

RESULTS = results_dir("speed")


def run_mode(gen: HFGenerator, prompts: list[str], n: int, mode: str) -> tuple[int, float]:
    """(useful tokens, seconds) of one mode over `prompts`."""
    calls = {
        "batched": lambda: [(prompts, n)],
        "per_prompt": lambda: [([p], n) for p in prompts],
        "per_sequence": lambda: [([p], 1) for p in prompts for _ in range(n)],
    }[mode]()
    tokens, seconds = 0, 0.0
    for batch, k in calls:
        out = gen.generate(batch, n=k)
        tokens += out.new_tokens
        seconds += out.seconds
    return tokens, seconds


def bench_model(spec: str, args) -> dict:
    loaded = load_model(ModelConfig(spec=spec))
    source = task_source(spec)
    tasks = source.sample(0, args.prompts)
    prompts = [render_prompt(loaded.tokenizer, t.question, source.system_prompt()) for t in tasks]
    cfg = GenerationConfig(max_new_tokens=args.max_new_tokens, group_size=args.group_size,
                           max_batch_sequences=max(256, args.prompts * args.group_size))
    gen = HFGenerator(loaded.model, loaded.tokenizer, cfg)
    torch.manual_seed(args.seed)
    gen.generate(prompts[:1], n=2)  # warm-up: lazy init, allocator, kernels
    rows = []
    for mode in ("batched", "per_prompt", "per_sequence"):
        subset = prompts if mode != "per_sequence" else prompts[: args.sequential_prompts]
        torch.manual_seed(args.seed)
        tokens, seconds = run_mode(gen, subset, args.group_size, mode)
        rows.append({"mode": mode, "prompts": len(subset), "sequences": len(subset) * args.group_size,
                     "tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds})
    base = {r["mode"]: r["tokens_per_s"] for r in rows}
    for r in rows:
        r["vs_per_prompt"] = r["tokens_per_s"] / base["per_prompt"]
        r["vs_per_sequence"] = r["tokens_per_s"] / base["per_sequence"]
    return {"rows": rows, "params": sum(p.numel() for p in loaded.model.parameters())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["smollm2-135m", "lab-chain-sum"])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--sequential-prompts", type=int, default=2, help="prompts timed in per_sequence mode")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tag", default="", help="suffix of the results file: generation_batching<tag>.json")
    args = ap.parse_args()
    set_threads(args.threads)

    (specs, skipped), results, summary = cached_models(args.models), {}, []
    for spec in specs:
        res = bench_model(spec, args)
        results[spec] = res
        print(f"\n== {spec} ({res['params'] / 1e6:.1f}M params): {args.prompts} prompts × G={args.group_size}, "
              f"max_new_tokens {args.max_new_tokens}, {args.threads} threads")
        print(table(res["rows"], ["mode", "prompts", "sequences", "tokens", "seconds", "tokens_per_s",
                                  "vs_per_prompt", "vs_per_sequence"]))
        batched = res["rows"][0]
        summary.append({"model": spec, "batched tok/s": batched["tokens_per_s"],
                        "batched / per-prompt": batched["vs_per_prompt"],
                        "batched / per-sequence": batched["vs_per_sequence"], "target": 4.0})
    if summary:
        print("\n" + table(summary, list(summary[0])))
    path = write_json(f"generation_batching{args.tag}", {"args": vars(args), "models": results, "summary": summary,
                                              "skipped": skipped}, RESULTS)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
