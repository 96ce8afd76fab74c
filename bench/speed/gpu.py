"""A GPU workstation node's round, side by side: generation and the training step in each precision setup.

One run, one model, one batch (B prompts × G completions, `--max-new-tokens` each), these scenarios:

  hf-generate     the reference: transformers `generate` (backend hf-generate) on the full-bf16 model,
                  generation only — every other row's `gen_ratio` is its gen_tok_s over this one's
  full-bf16       bfloat16 weights, full fine-tuning, the `hf` decode loop
  fp32-autocast   float32 weights under bfloat16 autocast (train.autocast), full fine-tuning, `hf` loop
  lora            LoRA r=16, alpha 32, every linear layer, on a bfloat16 base; generation from the merged
                  copy (generation.hf.merge_lora)
  vllm            full-bf16 with the vllm backend, when vllm imports (weights synced after the step)

Each scenario: `place` (train.device, autocast) as a node does, `train.micro_batch_rows: auto` and
`train.gradient_checkpointing: auto` resolved by node.round.memory, one warm-up round (CUDA graph
capture, allocator), then one measured round:
  gen_tok_s    generated tokens (each completion to its EOS) / generation seconds
  step_s       the optimizer step over all B·G rows (GRPO loss, random ±1 advantages)
  train_tok_s  tokens the step processed (prompt + completion of every row) / step_s
  round_s      generation + step + the generator's weight sync (merged-copy refresh, vLLM reload):
               a round's device work (verification and the swarm exchange are not in it)
  mfu          model FLOPs of the step / step_s / the GPU's dense bf16 peak (`PEAK_FLOPS`, or
               --peak-tflops): 6·N per token for full fine-tuning, 4·N for LoRA (no weight gradients
               of the frozen base), N the matmul parameters (output head included), plus attention
               12·layers·hidden·(mean row length) per token (PaLM's accounting); null on a CPU
  peak_gib     the most memory in use during the scenario above where it started: on CUDA the whole
               device's (torch.cuda.mem_get_info, sampled every 20 ms: vLLM's engine process counts),
               on a CPU this process's resident memory
plus `micro_batch_rows`, `checkpointing` (the auto choices) and `is_weight_max` (the step's largest
π_θ/μ: 1 when generation and scoring agree).

The models are built in memory from a seed, offline:
  qwen2-1.5b-random  Qwen2.5-1.5B's shape (28 layers, hidden 1536, 12 heads / 2 KV heads, MLP 8960, tied
                     embeddings) with its 151,936-entry vocabulary, random init, tiny-qwen2's tokenizer
                     (ids it does not know decode to nothing) — the logits cost what they really cost
  tiny               tiny-qwen2's body with the same 151,936-entry vocabulary (CPU; CI)

    python -m bench.speed.gpu                          # CUDA: qwen2-1.5b-random, 16 × 8 × 256 → bench/results/speed/gpu.json
    python -m bench.speed.gpu --quick                  # 4 × 8 × 64 (make test-gpu)
    python -m bench.speed.gpu --device cpu --model tiny   # under a minute → bench/results/speed/gpu_cpu.json
"""

from __future__ import annotations

import argparse
import gc
import random
import threading
import time
from pathlib import Path

import torch

from bench.harness.models import set_threads, task_source
from bench.harness.output import results_dir, table, write_json
from losses import build_loss
from node.generation.base import build_generator
from node.generation.config import GenerationConfig
from node.models.config import LoraSpec, ModelConfig
from node.models.device import place
from node.models.load import load_model, wrap_lora
from node.round.config import TrainConfig
from node.round.memory import plan_memory
from node.round.scoring import TokenRow
from node.round.train import Row, build_optimizer, train_step
from node.tasks.source import render_prompt

RESULTS = results_dir("speed")

VOCAB = 151_936
QWEN2_15B = dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                 tie_word_embeddings=True)
PEAK_FLOPS = {"H100 80GB HBM3": 989e12, "H100 SXM": 989e12, "H100 NVL": 835e12, "H100 PCIe": 756e12,
              "H200": 989e12, "GH200": 989e12, "A100": 312e12}  # dense bf16, by a substring of the device name
SCENARIOS = ("hf-generate", "full-bf16", "fp32-autocast", "lora", "vllm")


class PeakMemory:
    """The most memory in use while it is entered, above the level at entry (see the module doc)."""

    def __init__(self, device: torch.device):
        self.device, self.peak, self._stop = device, 0, threading.Event()

    def _used(self) -> int:
        if self.device.type == "cuda":
            free, total = torch.cuda.mem_get_info(self.device)
            return total - free
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    def _watch(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self._used() - self.base)

    def __enter__(self):
        self.base = self._used()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._used() - self.base)


def build_model(name: str, dtype: torch.dtype, device: torch.device, tokenizer, body_config) -> torch.nn.Module:
    """The bench model (module doc), initialised from seed 0 directly on `device`."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    shape = QWEN2_15B if name == "qwen2-1.5b-random" else {
        k: getattr(body_config, k) for k in (*QWEN2_15B, "head_dim") if hasattr(body_config, k)}
    config = Qwen2Config(**shape, vocab_size=VOCAB, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), torch.device(device):
        torch.manual_seed(0)
        return AutoModelForCausalLM.from_config(config, dtype=dtype)


def matmul_params(model: torch.nn.Module) -> int:
    """Parameters that multiply activations: every linear layer, the output head included (not the embedding)."""
    inner = model.get_base_model() if hasattr(model, "peft_config") else model
    return sum(m.weight.numel() for m in inner.modules() if isinstance(m, torch.nn.Linear))


def rows_of(groups, prompt_ids, rng: random.Random) -> list[Row]:
    return [Row(TokenRow(ids, list(c.token_ids)), list(c.logprobs), sum(c.logprobs), True, rng.choice((-1.0, 1.0)),
                gid, False) for gid, (ids, group) in enumerate(zip(prompt_ids, groups)) for c in group]


def run_scenario(name: str, args, device, tokenizer, body_config, prompts) -> dict:
    dtype = torch.float32 if name == "fp32-autocast" else torch.bfloat16
    if device.type == "cpu" and name != "fp32-autocast":
        dtype = torch.bfloat16
    model = build_model(args.model, dtype, device, tokenizer, body_config)
    if name == "lora":
        model = wrap_lora(model, LoraSpec(r=16, alpha=32))
    train_cfg = TrainConfig(device=str(device), autocast="bfloat16" if name == "fp32-autocast" else None,
                            lr=1e-6, micro_batch_rows="auto", gradient_checkpointing="auto")
    backend = {"hf-generate": "hf-generate", "vllm": "vllm"}.get(name, "hf")
    b, g, new = args.prompts, args.group_size, args.max_new_tokens
    gen_cfg = GenerationConfig(backend=backend, prompts_per_round=b, group_size=g, max_new_tokens=new,
                               max_batch_sequences=b * g, vllm={"max_num_seqs": b * g, "max_model_len": 1024})
    row = {"name": name}
    with PeakMemory(device) as peak:
        place(model, train_cfg)
        gen = build_generator(gen_cfg, model, tokenizer)
        prompt_ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        longest = max(len(p) for p in prompt_ids) + new
        reserve = gen.reserve_bytes(b * g, longest) if hasattr(gen, "reserve_bytes") else 0
        plan = plan_memory(model, train_cfg, row_tokens=longest, completion_tokens=new, step_rows=b * g,
                           pad_id=tokenizer.pad_token_id, reserve=reserve)
        cfg = train_cfg.model_copy(update={"micro_batch_rows": plan.micro_batch_rows,
                                           "gradient_checkpointing": plan.checkpointing})
        opt = build_optimizer(model, cfg)
        rng = random.Random(0)
        for measured in (False, True):  # a warm-up round, then the measured one
            torch.manual_seed(1)
            res = gen.generate(prompts, n=g)
            row.update(gen_s=res.seconds, gen_tokens=res.new_tokens, gen_tok_s=res.new_tokens / res.seconds)
            if name == "hf-generate":
                continue
            rows = rows_of(res.groups, prompt_ids, rng)
            step = train_step(model, opt, rows, build_loss("grpo"), cfg, temperature=1.0,
                              pad_id=tokenizer.pad_token_id)
            _sync(device)
            t0 = time.perf_counter()
            gen.sync_weights(model, 1 + measured)
            if hasattr(gen, "merged") and gen.merged is not None:
                gen.merged()  # the refresh a LoRA round pays before its next generation
            _sync(device)
            sync_s = time.perf_counter() - t0
            tokens = sum(len(r.tokens.prompt_ids) + len(r.tokens.completion_ids) for r in rows)
            row.update(step_s=step.seconds, train_tok_s=tokens / step.seconds, sync_s=sync_s,
                       round_s=res.seconds + step.seconds + sync_s, micro_batch_rows=plan.micro_batch_rows,
                       checkpointing=plan.checkpointing, is_weight_max=step.metrics.get("is_weight_max"),
                       mfu=_mfu(model, name, rows, step.seconds, device, args))
        if hasattr(gen, "close"):
            gen.close()
    row["peak_gib"] = peak.peak / 2**30
    del gen, model, opt
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _mfu(model, name, rows, seconds, device, args) -> float | None:
    peak = args.peak_tflops * 1e12 if args.peak_tflops else next(
        (v for k, v in PEAK_FLOPS.items() if device.type == "cuda" and k in torch.cuda.get_device_name(device)), None)
    if peak is None:
        return None
    config = (model.get_base_model() if hasattr(model, "peft_config") else model).config
    lengths = [len(r.tokens.prompt_ids) + len(r.tokens.completion_ids) for r in rows]
    per_token = (4 if name == "lora" else 6) * matmul_params(model) \
        + 12 * config.num_hidden_layers * config.hidden_size * sum(lengths) / len(lengths)
    return per_token * sum(lengths) / seconds / peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["qwen2-1.5b-random", "tiny"], default=None,
                    help="default: qwen2-1.5b-random on CUDA, tiny on a CPU")
    ap.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda when torch sees one)")
    ap.add_argument("--quick", action="store_true", help="4 prompts × 8 × 64 tokens (make test-gpu)")
    ap.add_argument("--prompts", type=int, default=None, help="B (default 16 on CUDA, 4 on a CPU or --quick)")
    ap.add_argument("--group-size", type=int, default=None, help="G (default 8, 4 on a CPU)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default 256 on CUDA, 64 --quick, 32 on a CPU")
    ap.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    ap.add_argument("--peak-tflops", type=float, default=None, help="the GPU's dense bf16 peak, for mfu")
    ap.add_argument("--out", type=Path, default=None, help="default bench/results/speed/gpu.json (gpu_cpu.json on a CPU)")
    args = ap.parse_args()
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cpu = device.type == "cpu"
    args.model = args.model or ("tiny" if cpu else "qwen2-1.5b-random")
    args.prompts = args.prompts or (4 if cpu or args.quick else 16)
    args.group_size = args.group_size or (4 if cpu else 8)
    args.max_new_tokens = args.max_new_tokens or (32 if cpu else 64 if args.quick else 256)
    if cpu:
        set_threads(2)
    tiny = load_model(ModelConfig(spec="tiny-qwen2"))  # its tokenizer (and body, for --model tiny)
    source = task_source("tiny-qwen2")
    prompts = [render_prompt(tiny.tokenizer, t.question, None) for t in source.sample(0, args.prompts)]
    scenarios = [s for s in args.scenarios if s != "vllm" or _vllm_imports()]
    rows = []
    for name in scenarios:
        print(f"[bench.speed.gpu] {name} …", flush=True)
        rows.append(run_scenario(name, args, device, tiny.tokenizer, tiny.model.config, prompts))
    ref = next((r["gen_tok_s"] for r in rows if r["name"] == "hf-generate"), None)
    for r in rows:
        r["gen_ratio"] = r["gen_tok_s"] / ref if ref else None
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"\n== {args.model} on {name}: {args.prompts} prompts × {args.group_size} × {args.max_new_tokens} tokens")
    print(table(rows, ["name", "gen_tok_s", "gen_ratio", "train_tok_s", "mfu", "step_s", "round_s", "peak_gib",
                       "micro_batch_rows", "checkpointing"]))
    out = args.out or RESULTS / ("gpu_cpu.json" if cpu else "gpu.json")
    path = write_json(out.stem, {"device": name, "model": args.model, "prompts": args.prompts,
                                 "group_size": args.group_size, "max_new_tokens": args.max_new_tokens,
                                 "scenarios": rows, "skipped": sorted(set(args.scenarios) - set(scenarios))},
                      directory=out.parent)
    print(f"wrote {path}")


def _vllm_imports() -> bool:
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        print(f"[bench.speed.gpu] vllm skipped: it does not import ({type(exc).__name__})")
        return False
    return True


if __name__ == "__main__":
    main()
