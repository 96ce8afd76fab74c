"""The `hf` backend's decode loop against transformers `generate` (`hf-generate`), side by side on this machine.

For each model, the same round (B of the model's own task prompts × G, ≤ `--max-new-tokens`, T = 1) through
both backends on the same weights, alternating backend by backend `--repeats` times after a warm-up round:

  tokens_per_s   useful tokens (each completion to its EOS) / generation seconds, the mean over repeats
  vs_generate    tokens_per_s / hf-generate's
  peak_mib       the most memory the round's generation held at once above what was held before it
                 (node.round.sizing.measure: torch's allocation events; on a CPU through torch.profiler,
                 in a separate, untimed round)

    python -m bench.speed.hf_loop                                   # lab-spell 16 × 8 × 16, smollm2-135m 4 × 4 × 64
    python -m bench.speed.hf_loop --models smollm2-135m --shape 16x8 --max-new-tokens 32
"""

from __future__ import annotations

import argparse
import statistics

import torch

from bench.harness.models import cached_models, set_threads, task_source
from bench.harness.output import results_dir, table, write_json
from node.generation.config import GenerationConfig
from node.generation.hf import HFGenerator
from node.generation.hf_generate import HFGenerateGenerator
from node.models.config import ModelConfig
from node.models.load import load_model
from node.round.sizing import measure
from node.tasks.source import render_prompt

RESULTS = results_dir("speed")

DEFAULTS = {"lab-spell": ((16, 8), 16), "smollm2-135m": ((4, 4), 64)}  # their example configs' rounds


def bench_model(spec: str, shape: tuple[int, int] | None, max_new: int | None, repeats: int, seed: int) -> dict:
    (b, g), new = shape or DEFAULTS.get(spec, ((4, 4), 32))[0], max_new or DEFAULTS.get(spec, ((4, 4), 32))[1]
    lm = load_model(ModelConfig(spec=spec))
    source = task_source(spec)
    prompts = [render_prompt(lm.tokenizer, t.question, source.system_prompt()) for t in source.sample(0, b)]
    cfg = GenerationConfig(max_new_tokens=new, group_size=g, max_batch_sequences=b * g)
    gens = {"hf-generate": HFGenerateGenerator(lm.model, lm.tokenizer, cfg), "hf": HFGenerator(lm.model, lm.tokenizer, cfg)}
    for gen in gens.values():  # warm-up: allocator, kernels, the loop's cache
        gen.generate(prompts, n=g)
    runs: dict[str, list[tuple[int, float]]] = {name: [] for name in gens}
    for r in range(repeats):
        for name, gen in gens.items():
            torch.manual_seed(seed + r)
            out = gen.generate(prompts, n=g)
            runs[name].append((out.new_tokens, out.seconds))
    rows = []
    for name, gen in gens.items():
        torch.manual_seed(seed)
        _, peak = measure(lambda gen=gen: gen.generate(prompts, n=g), lambda: None, torch.device("cpu"))
        rates = [t / s for t, s in runs[name]]
        rows.append({"backend": name, "tokens": sum(t for t, _ in runs[name]) // repeats,
                     "seconds": statistics.fmean(s for _, s in runs[name]), "tokens_per_s": statistics.fmean(rates),
                     "peak_mib": peak / 2**20})
    ref = rows[0]
    for r in rows:
        r["vs_generate"] = r["tokens_per_s"] / ref["tokens_per_s"]
        r["peak_vs_generate"] = r["peak_mib"] / ref["peak_mib"]
    return {"shape": f"{b}x{g}", "max_new_tokens": new, "vocab": lm.vocab_size,
            "params": sum(p.numel() for p in lm.model.parameters()), "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=list(DEFAULTS))
    ap.add_argument("--shape", default=None, help="B x G (default: each model's example round)")
    ap.add_argument("--max-new-tokens", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tag", default="", help="suffix of the results file name")
    args = ap.parse_args()
    set_threads(args.threads)
    shape = tuple(int(x) for x in args.shape.split("x")) if args.shape else None
    (specs, skipped), results = cached_models(args.models), {}
    for spec in specs:
        res = results[spec] = bench_model(spec, shape, args.max_new_tokens, args.repeats, args.seed)
        print(f"\n== {spec} ({res['params'] / 1e6:.1f}M params, vocab {res['vocab']}): {res['shape']}, "
              f"≤ {res['max_new_tokens']} new tokens, {args.repeats} repeats")
        print(table(res["rows"], ["backend", "tokens", "seconds", "tokens_per_s", "vs_generate", "peak_mib",
                                  "peak_vs_generate"]))
    path = write_json(f"hf_loop{args.tag}", {"args": vars(args), "models": results, "skipped": skipped}, RESULTS)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
