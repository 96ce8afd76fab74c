"""One scenario of bench.speed.gpu, run in this process: its model built, placed and planned as a node does,
a warm-up round, then the measured round (the fields are described in bench/speed/gpu.py's module doc).

bench.speed.gpu runs each scenario in a process of its own (`python -m bench.speed.gpu --child NAME`), so
that one which fails or runs out of memory is recorded as such and the others still run. Here:
  run_scenario   the scenario's row (its numbers, `decode`: how generation's steps ran and why)
  child          run_scenario with its failure classified: `status` ok | out of memory | failed, and
                 `error` (the exception's first line); the row goes to a JSON file for the parent
  step_flops     the step's model FLOPs: 6 (LoRA: 4) × the body's matmul parameters × every token the step
                 processes, the output head's only × the completion tokens (the scorer computes logits
                 only where a completion token is predicted: node.round.logprobs), plus attention
                 12 · layers · hidden · (mean row length) per token (PaLM's accounting)
  timed          a call's seconds with the device synchronised before and after (CUDA runs asynchronously:
                 without the last sync the optimizer step's kernels are still running when the clock stops)

`SWARM_BENCH_FAIL=<scenario>[:oom]` makes that scenario raise at its start (a RuntimeError, or
torch.OutOfMemoryError with `:oom`): how tests/unit/bench/test_gpu_targets.py checks the isolation on a CPU.
"""

from __future__ import annotations

import gc
import json
import os
import random
import threading
import time
import traceback
from pathlib import Path

import torch

from losses import build_loss
from node.generation.base import build_generator
from node.generation.config import GenerationConfig
from node.models.config import LoraSpec
from node.models.device import place
from node.models.load import wrap_lora
from node.round.config import TrainConfig
from node.round.sizing import plan_memory
from node.round.logprobs import TokenRow
from node.round.train import Row, build_optimizer, train_step

VOCAB = 151_936
QWEN2_15B = dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                 tie_word_embeddings=True)
PEAK_FLOPS = {"H100 80GB HBM3": 989e12, "H100 SXM": 989e12, "H100 NVL": 835e12, "H100 PCIe": 756e12,
              "H200": 989e12, "GH200": 989e12, "A100": 312e12}  # dense bf16, by a substring of the device name


class PeakMemory:
    """The most memory in use while it is entered, above the level at entry (see bench/speed/gpu.py)."""

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
    """The bench model (bench/speed/gpu.py), initialised from seed 0 directly on `device`."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    shape = QWEN2_15B if name == "qwen2-1.5b-random" else {
        k: getattr(body_config, k) for k in (*QWEN2_15B, "head_dim") if hasattr(body_config, k)}
    config = Qwen2Config(**shape, vocab_size=VOCAB, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), torch.device(device):
        torch.manual_seed(0)
        return AutoModelForCausalLM.from_config(config, dtype=dtype)


def _inner(model: torch.nn.Module) -> torch.nn.Module:
    return model.get_base_model() if hasattr(model, "peft_config") else model


def matmul_params(model: torch.nn.Module) -> int:
    """Parameters that multiply activations: every linear layer, the output head included (not the embedding)."""
    return sum(m.weight.numel() for m in _inner(model).modules() if isinstance(m, torch.nn.Linear))


def step_flops(model: torch.nn.Module, lora: bool, rows: list[Row]) -> float:
    """Model FLOPs of one optimizer step over `rows` (module doc)."""
    inner = _inner(model)
    config = inner.config
    head = inner.get_output_embeddings().weight.numel()
    lengths = [len(r.tokens.prompt_ids) + len(r.tokens.completion_ids) for r in rows]
    tokens, completion = sum(lengths), sum(len(r.tokens.completion_ids) for r in rows)
    factor = 4 if lora else 6
    attention = 12 * config.num_hidden_layers * config.hidden_size * tokens / len(lengths)
    return factor * (matmul_params(model) - head) * tokens + factor * head * completion + attention * tokens


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device):
    """(fn(), its seconds), the device synchronised before and after (module doc)."""
    _sync(device)
    t0 = time.perf_counter()
    out = fn()
    _sync(device)
    return out, time.perf_counter() - t0


def _peak_flops(device: torch.device, peak_tflops: float | None) -> float | None:
    if peak_tflops:
        return peak_tflops * 1e12
    if device.type != "cuda":
        return None
    return next((v for k, v in PEAK_FLOPS.items() if k in torch.cuda.get_device_name(device)), None)


def rows_of(groups, prompt_ids, rng: random.Random) -> list[Row]:
    return [Row(TokenRow(ids, list(c.token_ids)), list(c.logprobs), sum(c.logprobs), True, rng.choice((-1.0, 1.0)),
                gid, False) for gid, (ids, group) in enumerate(zip(prompt_ids, groups)) for c in group]


def run_scenario(name: str, args, device, tokenizer, body_config, prompts) -> dict:
    dtype = torch.float32 if name == "fp32-autocast" else torch.bfloat16
    model = build_model(args.model, dtype, device, tokenizer, body_config)
    if name == "lora":
        model = wrap_lora(model, LoraSpec(r=16, alpha=32))
    train_cfg = TrainConfig(device=str(device), autocast="bfloat16" if name == "fp32-autocast" else None,
                            lr=1e-6, micro_batch_rows="auto", gradient_checkpointing="auto")
    backend = {"hf-generate": "hf-generate", "vllm": "vllm"}.get(name, "hf")
    b, g, new = args.prompts, args.group_size, args.max_new_tokens
    gen_cfg = GenerationConfig(backend=backend, prompts_per_round=b, group_size=g, max_new_tokens=new,
                               max_batch_sequences=b * g, vllm={"max_num_seqs": b * g, "max_model_len": 1024})
    row = {"name": name, "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}
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
            row.update(gen_s=res.seconds, gen_tokens=res.new_tokens, gen_tok_s=res.new_tokens / res.seconds,
                       decode=getattr(gen, "decode_mode", None))
            if name == "hf-generate":
                continue
            rows = rows_of(res.groups, prompt_ids, rng)
            step, step_s = timed(lambda: train_step(model, opt, rows, build_loss("grpo"), cfg, temperature=1.0,
                                                    pad_id=tokenizer.pad_token_id), device)

            def sync_weights():
                gen.sync_weights(model, 1 + measured)
                if getattr(gen, "merged", None) is not None:
                    gen.merged()  # the refresh a LoRA round pays before its next generation

            _, sync_s = timed(sync_weights, device)
            tokens = sum(len(r.tokens.prompt_ids) + len(r.tokens.completion_ids) for r in rows)
            peak_flops = _peak_flops(device, args.peak_tflops)
            row.update(step_s=step_s, train_tok_s=tokens / step_s, sync_s=sync_s,
                       round_s=res.seconds + step_s + sync_s, micro_batch_rows=plan.micro_batch_rows,
                       checkpointing=plan.checkpointing, is_weight_max=step.metrics.is_weight_max,
                       mfu=step_flops(model, name == "lora", rows) / step_s / peak_flops if peak_flops else None)
        if hasattr(gen, "close"):
            gen.close()
    row["peak_gib"] = peak.peak / 2**30
    del gen, model, opt
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def child(name: str, args, device, tokenizer, body_config, prompts, out: Path) -> int:
    """run_scenario, its outcome written to `out` as one JSON row (module doc); the exit status: 0 ok, 3 not."""
    try:
        injected = os.environ.get("SWARM_BENCH_FAIL", "")
        if injected.split(":")[0] == name:
            raise (torch.OutOfMemoryError if injected.endswith(":oom") else RuntimeError)(
                f"SWARM_BENCH_FAIL={injected}: injected failure")
        row = {**run_scenario(name, args, device, tokenizer, body_config, prompts), "status": "ok"}
    except torch.OutOfMemoryError as exc:
        traceback.print_exc()  # into the scenario's log
        row = {"name": name, "status": "out of memory", "error": _first_line(exc)}
    except Exception as exc:  # noqa: BLE001 — recorded, and the other scenarios still run
        traceback.print_exc()
        row = {"name": name, "status": "failed", "error": f"{type(exc).__name__}: {_first_line(exc)}"}
    out.write_text(json.dumps(row))
    return 0 if row["status"] == "ok" else 3


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:300]
