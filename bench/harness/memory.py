"""How much memory a bench job (one swarm of nodes in one process) will take, before it starts, so that a run
refuses jobs that will not fit rather than be killed by the kernel.

The estimate, per node of a job (one process holds all of a swarm's nodes; they take turns, so one node's step
is live at a time):

    fixed    = 4 · params (float32 weights) + 16 · trainable params (gradient + AdamW's two moments)
               + 4 · adapted params with LoRA and `generation.hf.merge_lora` (the merged copy generation runs on,
               node.generation.merged: every linear layer's weights once more)
               + 200 MiB (the node's tokenizer, task source and allocator overhead)
    step     = micro_batch_rows · (96 + max_new_tokens) · per_token   (96: more than a lab or reasoning-gym prompt)
    per_token = ACTIVATION_FACTOR · 4 · layers · (12 · hidden + 5 · intermediate)   (float32 activations a token
               keeps for the backward pass without gradient checkpointing; a quarter of that with it)
    cache    = the decode loop's KV cache for the larger of a round's batch and the held-out evaluation's:
               kv_per_token · rows · (96 + max_new_tokens), kv_per_token = 2 · layers · kv_heads · head_dim · 4
               bytes — once a job: on a CPU the loop keeps no decoder between batches (node.generation.decode)
               and the nodes take turns

and a job needs PROCESS (the interpreter with torch and transformers imported, ≈ 350 MiB measured) + nodes · fixed
+ cache + step + RESIDUE · step (glibc keeps much of a freed step's memory: the peak
of the next step is not the process's only use). Before decoders were freed on a CPU each node kept two (the
round's and the evaluation's, ≈ 1.4 GB a SmolLM2 node): a 2-node SmolLM2 job at 8 rows measured 8.3–9.1 GB. With
decoders freed, a 2-node SmolLM2 job at 4 rows measured 6.4–6.5 GB over its first hour, where the estimate without
the merged copy and PROCESS gave 4.65 GB; with them it gives 5.8 GB. ACTIVATION_FACTOR is calibrated on SmolLM2-135M-Instruct + LoRA on this
CPU: an 8-row step of ≈ 110 tokens a row added 2.7 GB to the process, 16 rows 5.5 GB (≈ 3.1 MB a token, where the
formula without the factor gives 1.75 MB: LoRA's dropout copies, attention weights and the float32 norms).
The lab models' estimate is a few hundred MiB a node; it matters for pretrained models, where a 64-row
micro-batch took ≈ 22 GB — what killed the real-LM benchmark on this 24 GiB machine.

On a GPU (`train.device: cuda…`) a job's host memory is counted as 2 × 200 MiB a node (the GPU's memory is the
planner's, node.round.sizing). `fits(job_bytes, workers)`: how many jobs may run side by side within MemAvailable (at least one; none, with
a message, when a single job does not fit).
"""

from __future__ import annotations

import json

from swarm.host.meminfo import available_bytes

ACTIVATION_FACTOR = 1.8
RESIDUE = 0.5
NODE_OVERHEAD = 200 << 20
PROCESS = 350 << 20


def _model_shape(spec: str) -> dict | None:
    """The model's config.json (layers, hidden, intermediate sizes) and parameter count, from the local cache."""
    from node.models.load import resolve_model_dir

    try:
        path = resolve_model_dir(spec, progress=lambda _m: None)
        config = json.loads((path / "config.json").read_text())
    except Exception:  # noqa: BLE001 — an estimate only: unknown models are not refused
        return None
    config = config.get("text_config", config)
    hidden, layers = config.get("hidden_size"), config.get("num_hidden_layers")
    heads0 = config.get("num_attention_heads") or 1
    head_dim = config.get("head_dim") or (hidden // heads0 if hidden else 0)
    if not hidden or not layers:
        return None
    inter = config.get("intermediate_size") or 4 * hidden
    vocab = config.get("vocab_size", 0)
    heads = config.get("num_attention_heads") or 1
    kv = config.get("num_key_value_heads") or heads
    per_layer = hidden * hidden * (2 + 2 * kv / heads) + 3 * hidden * inter
    params = layers * per_layer + vocab * hidden * (1 if config.get("tie_word_embeddings", True) else 2)
    return {"hidden": hidden, "layers": layers, "intermediate": inter, "params": params,
            "adapted": layers * per_layer,
            "kv_per_token": 2 * layers * kv * head_dim * 4}


def job_bytes(config_path: str, overrides: dict, nodes: int) -> int | None:
    """The estimate of the module docstring for one job of `nodes` nodes (None: the model is unknown here)."""
    from node.config import load_config

    cfg = load_config(config_path, overrides)
    if str(cfg.train.device).startswith("cuda"):  # weights, steps and caches live on the GPU: host memory is small
        return nodes * 2 * NODE_OVERHEAD
    shape = _model_shape(cfg.model.spec)
    if shape is None:
        return None
    trainable = shape["params"] if cfg.model.lora is None else \
        shape["layers"] * 7 * 2 * cfg.model.lora.r * shape["hidden"]
    g = cfg.generation
    rows = [min(g.max_batch_sequences, n) for n in (g.prompts_per_round * g.group_size,
                                                    cfg.tasks.eval_size * cfg.eval.samples)]
    cache = shape["kv_per_token"] * max(rows) * (96 + g.max_new_tokens)
    merged = cfg.model.lora is not None and cfg.generation.backend in ("hf", "auto") \
        and cfg.generation.hf.merge_lora
    fixed = 4 * shape["params"] + 16 * trainable + NODE_OVERHEAD + (4 * shape["adapted"] if merged else 0)
    rows = cfg.train.micro_batch_rows
    if rows == "auto":  # the planner fits the step into what it sees free: count a modest micro-batch
        rows = 8
    per_token = ACTIVATION_FACTOR * 4 * shape["layers"] * (12 * shape["hidden"] + 5 * shape["intermediate"])
    if cfg.train.gradient_checkpointing is True:
        per_token /= 4
    row_tokens = 96 + cfg.generation.max_new_tokens  # a prompt of the lab and reasoning-gym tasks: < 96 tokens
    step = rows * row_tokens * per_token
    return int(PROCESS + nodes * fixed + cache + (1 + RESIDUE) * step)


def fits(need: int | None, workers: int, available: int | None = None) -> tuple[int, str | None]:
    """(jobs that may run side by side, a message when even one does not fit — the caller then refuses)."""
    available = available_bytes() if available is None else available
    if need is None or available is None:
        return workers, None
    usable = int(0.9 * available)
    if need > usable:
        return 0, (f"one job needs ≈ {need / 2**30:.1f} GiB (bench/harness/memory.py) and this machine has "
                   f"{available / 2**30:.1f} GiB available: lower train.micro_batch_rows, --nodes, or free memory")
    return max(1, min(workers, usable // need)), None
