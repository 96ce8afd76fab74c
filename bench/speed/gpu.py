"""A GPU workstation node's round, side by side: generation and the training step in each precision setup.

One model shape, one batch (B prompts × G completions, `--max-new-tokens` each), these scenarios, each in a
process of its own (bench.speed.gpu_round), in this order — the reference last:

  full-bf16       bfloat16 weights, full fine-tuning, the `hf` decode loop
  fp32-autocast   float32 weights under bfloat16 autocast (train.autocast), full fine-tuning, `hf` loop
  lora            LoRA r=16, alpha 32, every linear layer, on a bfloat16 base; generation from the merged
                  copy (generation.hf.merge_lora)
  vllm            full-bf16 with the vllm backend, when vllm is installed (weights synced after the step)
  hf-generate     the reference: transformers `generate` (backend hf-generate) on the full-bf16 model,
                  generation only — every other row's `gen_ratio` is its gen_tok_s over this one's

A scenario that fails, runs out of memory, dies or outlives `--scenario-timeout` is recorded as such
(`status`: ok | out of memory | failed | crashed | timed out, and `error`: what it said) and the others
still run; its output is in its log (`--logs`, one file per scenario). The results are written whatever
happened; the exit status is 1 when a scenario was not ok.

Each scenario: `place` (train.device, autocast) as a node does, `train.micro_batch_rows: auto` and
`train.gradient_checkpointing: auto` resolved by node.round.sizing, one warm-up round (CUDA graph
capture, allocator), then one measured round:
  gen_tok_s    generated tokens (each completion to its EOS) / generation seconds
  decode       how generation's steps ran and why: graphs | eager: no CUDA | eager: capture failed: <reason>
               | eager: transformers generate (…) | vllm: … (node.generation.decode.DecodeLoop.mode)
  step_s       the optimizer step over all B·G rows (GRPO loss, random ±1 advantages), the device
               synchronised before and after (bench.speed.gpu_round.timed)
  train_tok_s  tokens the step processed (prompt + completion of every row) / step_s
  round_s      generation + step + the generator's weight sync (merged-copy refresh, vLLM reload):
               a round's device work (verification and the swarm exchange are not in it)
  mfu          the step's model FLOPs (bench.speed.gpu_round.step_flops: 6·N per token for full fine-tuning,
               4·N for LoRA, N the body's matmul parameters; the output head's only for completion tokens,
               the only ones it is computed for; plus attention) / step_s / the GPU's dense bf16 peak
               (`PEAK_FLOPS`, or --peak-tflops); null on a CPU
  peak_gib     the most memory in use during the scenario above where it started: on CUDA the whole
               device's (torch.cuda.mem_get_info, sampled every 20 ms: vLLM's engine process counts),
               on a CPU this process's resident memory
plus `micro_batch_rows`, `checkpointing` (the auto choices), `is_weight_max` (the step's largest π_θ/μ: 1
when generation and scoring agree) and `wall_s` (the scenario's process, start to end).

The models are built in memory from a seed, offline:
  qwen2-1.5b-random  Qwen2.5-1.5B's shape (28 layers, hidden 1536, 12 heads / 2 KV heads, MLP 8960, tied
                     embeddings) with its 151,936-entry vocabulary, random init, tiny-qwen2's tokenizer
                     (ids it does not know decode to nothing) — the logits cost what they really cost
  tiny               tiny-qwen2's body with the same 151,936-entry vocabulary (CPU; CI)

    python -m bench.speed.gpu                     # CUDA: qwen2-1.5b-random, 16 × 8 × 256 → gpu.json
    python -m bench.speed.gpu --quick             # 4 × 8 × 64 → gpu_quick.json (never gpu.json)
    python -m bench.speed.gpu --device cpu --model tiny   # about a minute → bench/results/speed/gpu_cpu.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness.output import results_dir, table, write_json

RESULTS = results_dir("speed")
ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ("full-bf16", "fp32-autocast", "lora", "vllm", "hf-generate")  # the order they run in
FORWARDED = ("model", "device", "prompts", "group_size", "max_new_tokens", "peak_tflops")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["qwen2-1.5b-random", "tiny"], default=None,
                    help="default: qwen2-1.5b-random on CUDA, tiny on a CPU")
    ap.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda when torch sees one)")
    ap.add_argument("--quick", action="store_true", help="4 prompts × 8 × 64 tokens, written to *_quick.json")
    ap.add_argument("--prompts", type=int, default=None, help="B (default 16 on CUDA, 4 on a CPU or --quick)")
    ap.add_argument("--group-size", type=int, default=None, help="G (default 8, 4 on a CPU)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default 256 on CUDA, 64 --quick, 32 on a CPU")
    ap.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    ap.add_argument("--peak-tflops", type=float, default=None, help="the GPU's dense bf16 peak, for mfu")
    ap.add_argument("--out", type=Path, default=None,
                    help="default bench/results/speed/gpu.json (gpu_cpu.json on a CPU; *_quick.json with --quick)")
    ap.add_argument("--logs", type=Path, default=None, help="one log per scenario here (default: a temporary folder)")
    ap.add_argument("--scenario-timeout", type=float, default=300.0, help="seconds one scenario may take")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)  # run this one scenario here
    ap.add_argument("--child-out", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    import torch

    cpu = (args.device or ("cuda" if torch.cuda.is_available() else "cpu")) == "cpu"
    args.device = args.device or ("cpu" if cpu else "cuda")
    args.model = args.model or ("tiny" if cpu else "qwen2-1.5b-random")
    args.prompts = args.prompts or (4 if cpu or args.quick else 16)
    args.group_size = args.group_size or (4 if cpu else 8)
    args.max_new_tokens = args.max_new_tokens or (32 if cpu else 64 if args.quick else 256)
    if args.out is None:
        args.out = RESULTS / (("gpu_cpu" if cpu else "gpu") + ("_quick" if args.quick else "") + ".json")
    if args.quick and args.out.resolve() == (RESULTS / "gpu.json").resolve():
        ap.error("--quick never writes bench/results/speed/gpu.json (the full run's record)")
    return args


def run_child(args: argparse.Namespace) -> int:
    """This process runs the one scenario `args.child` (bench.speed.gpu_round.child)."""
    import torch

    from bench.harness.models import set_threads, task_source
    from bench.speed.gpu_round import child
    from node.models.config import ModelConfig
    from node.models.load import load_model
    from node.tasks.source import render_prompt

    device = torch.device(args.device)
    if device.type == "cpu":
        set_threads(2)
    tiny = load_model(ModelConfig(spec="tiny-qwen2"))  # its tokenizer (and body, for --model tiny)
    tasks = task_source("tiny-qwen2").sample(0, args.prompts)
    prompts = [render_prompt(tiny.tokenizer, t.question, None) for t in tasks]
    return child(args.child, args, device, tiny.tokenizer, tiny.model.config, prompts, args.child_out)


def run_isolated(name: str, args: argparse.Namespace, logs: Path) -> dict:
    """One scenario in its own process (and process group): its row, or what became of it."""
    out, log = logs / f"{name}.json", logs / f"{name}.log"
    out.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "bench.speed.gpu", "--child", name, "--child-out", str(out)]
    for key in FORWARDED:
        if getattr(args, key) is not None:
            cmd += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    t0 = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=args.scenario_timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # vLLM's engine process too
            proc.wait()
            rc = None
    wall = time.perf_counter() - t0
    tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-1:] or [""]
    if rc is None:
        row = {"name": name, "status": "timed out", "error": f"after {args.scenario_timeout:.0f} s: {tail[0][:200]}"}
    elif out.is_file():
        row = json.loads(out.read_text())
    else:  # died without a word: a signal (the kernel's OOM killer sends 9), a native crash
        text = log.read_text(errors="replace")
        oom = rc == -signal.SIGKILL or "out of memory" in text.lower()
        row = {"name": name, "status": "out of memory" if oom else "crashed",
               "error": f"exit status {rc}: {tail[0][:200]}"}
    return {**row, "wall_s": wall}


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.child:
        return run_child(args)
    import torch

    scenarios = [s for s in SCENARIOS if s in args.scenarios]
    skipped = []
    if "vllm" in scenarios and importlib.util.find_spec("vllm") is None:
        print("[bench.speed.gpu] vllm skipped: not installed", flush=True)
        scenarios.remove("vllm")
        skipped.append("vllm")
    logs = args.logs or Path(tempfile.mkdtemp(prefix="bench-gpu-logs-"))
    logs.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in scenarios:
        print(f"[bench.speed.gpu] {name} … (log: {logs / (name + '.log')})", flush=True)
        rows.append(run_isolated(name, args, logs))
        r = rows[-1]
        print(f"[bench.speed.gpu] {name}: {r['status']}" + (f" ({r['error']})" if r.get("error") else "")
              + f" in {r['wall_s']:.0f} s", flush=True)
    ref = next((r["gen_tok_s"] for r in rows if r["name"] == "hf-generate" and r["status"] == "ok"), None)
    for r in rows:
        if r["status"] == "ok":
            r["gen_ratio"] = r["gen_tok_s"] / ref if ref else None
    device = next((r["device"] for r in rows if r.get("device")), "cpu" if args.device == "cpu" else args.device)
    import transformers

    print(f"\n== {args.model} on {device}: {args.prompts} prompts × {args.group_size} × {args.max_new_tokens} tokens")
    print(table(rows, ["name", "status", "gen_tok_s", "gen_ratio", "train_tok_s", "mfu", "step_s", "round_s",
                       "peak_gib", "micro_batch_rows", "checkpointing", "decode"]))
    path = write_json(args.out.stem, {
        "device": device, "model": args.model, "prompts": args.prompts, "group_size": args.group_size,
        "max_new_tokens": args.max_new_tokens, "quick": args.quick, "torch": torch.__version__,
        "transformers": transformers.__version__, "scenarios": rows, "skipped": skipped,
        "not_ok": [r["name"] for r in rows if r["status"] != "ok"]}, directory=args.out.parent)
    print(f"wrote {path}; logs in {logs}")
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
