"""The `hf` backend's decode loop: every row of a round in one batch over a preallocated KV cache.

    prefill   the left-padded prompts [rows, P] in one forward pass into a transformers StaticCache of
              `length` slots; only the last position's logits are computed (logits_to_keep=1)
    step      one token per row per forward: the cache slot P + t, each row's own position (its real
              prompt length + t), and a boolean attention mask over the cache's slots kept in a
              static buffer (prompt padding off, every slot written so far on)
    sample    node.generation.sampling.sample_next on that step's [rows, vocab] logits: the token and
              its log μ in float32 at once; nothing of shape [rows, steps, vocab] is ever kept
    stop      a row stops at its first EOS (later tokens are padding, trimmed by the caller); the loop
              ends when every row has stopped or `max_new_tokens` were sampled. Without a CUDA graph,
              once a quarter of the rows still in the batch have stopped they are dropped from it
              (the KV cache cut by transformers' `reorder_cache`): a CPU does not spend steps on them

Left padding: a padded query position attends to its own slot only, so the padding's keys and values
stay finite (never NaN) and no real token ever attends to them.

Attention: the mask goes to the model as a ready 4D tensor — boolean for `sdpa` (the implementation
the loop chooses: `attention_backend`), additive float for `eager`; other implementations are not
supported (node.generation.hf falls back to `generate` for them, saying so). On CUDA the decode
attention runs on SDPA's memory-efficient or math kernels: flash needs no mask and cuDNN's kernel
costs milliseconds of host time per call (`DECODE_SDPA_BACKENDS`).

CUDA graphs (node.generation.graphs): on a GPU the step is captured once per (rows bucket, length
bucket) and replayed, so a decode step costs one launch instead of thousands; the buffers above are
exactly the graph's inputs. Rows are padded up to a power of two (≥ 8) and lengths to a multiple of
128 there, so a few buckets serve every round; on the CPU rows are exact and lengths rounded to 16.
With CUDA graphs the loop keeps one decoder per rows bucket (at most `KEEP`): a batch takes the kept decoder
of its rows whose cache is long enough, and a longer batch replaces it, so a round whose prompts cross a
length bucket does not push out the held-out evaluation's decoder (and its graph) — lengths only grow.
Eager decoders are not kept (`keep` 0): a capture is what reuse saves, and a kept eager cache only holds
memory between rounds (SmolLM2's held-out evaluation of 200 rows: ≈ 1.1 GB, used twice a run).
`mode` says how the steps run and why: "graphs", "eager: no CUDA", "eager: generation.hf.cuda_graphs
is false", "eager: capture failed: <reason>" (a failed capture leaves a working eager decoder).

Across transformers versions (node.generation.compat): the KV cache stores keys in the values' dtype
(float32 weights under bfloat16 autocast), and a decode step with grouped-query attention reads the
cache's K/V heads without expanding them to the query heads.
"""

from __future__ import annotations

import inspect
import logging
from collections import OrderedDict
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from node.generation.compat import KVCache, gqa_decoding, uses_gqa
from node.generation.sampling import sample_next

log = logging.getLogger(__name__)

SUPPORTED_ATTENTION = ("sdpa", "eager")


def attention_backend(model: torch.nn.Module) -> str | None:
    """The model's attention implementation when the loop supports it, else None."""
    impl = getattr(model.config, "_attn_implementation", None) or "eager"
    return impl if impl in SUPPORTED_ATTENTION else None


def unsupported_reason(model: torch.nn.Module) -> str | None:
    """Why the decode loop cannot run this model (None: it can)."""
    config = model.config
    if attention_backend(model) is None:
        return f"attention implementation {config._attn_implementation!r} (the loop runs sdpa or eager)"
    types = getattr(config, "layer_types", None) or []
    if any(t != "full_attention" for t in types) or getattr(config, "use_sliding_window", False):
        return "sliding-window or hybrid attention layers (the loop's mask spans the whole cache)"
    if getattr(config, "is_encoder_decoder", False):
        return "an encoder-decoder model"
    return None


def _decode_sdpa_backends():
    from torch.nn.attention import SDPBackend

    return [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def attention_context(device: torch.device):
    """The SDPA kernels a decode step may use on this device (CUDA: efficient or math, never cuDNN)."""
    if device.type != "cuda":
        return nullcontext()
    from torch.nn.attention import sdpa_kernel

    return sdpa_kernel(_decode_sdpa_backends())


class ForwardCall:
    """How this model's forward takes a cache (transformers renamed `past_key_values` to `cache`, and
    versions before StaticCache tracked its own length need `cache_position`)."""

    def __init__(self, model: torch.nn.Module):
        params = inspect.signature(type(model).forward).parameters
        self.cache_name = "cache" if "cache" in params else "past_key_values"
        self.cache_position = "cache_position" in params
        self.eager = attention_backend(model) == "eager"
        self.gqa = uses_gqa(model)  # decode steps read the K/V heads as cached (node.generation.compat)
        self.dtype = next(model.parameters()).dtype

    def __call__(self, model, cache, ids, positions, attend, slots) -> torch.Tensor:
        """Logits [rows, vocab] of the last query position; `attend` is a bool [rows, 1, q, length] mask."""
        mask = attend
        if self.eager:  # eager attention adds its mask to the scores
            mask = torch.zeros(attend.shape, dtype=self.dtype, device=attend.device).masked_fill(
                ~attend, torch.finfo(self.dtype).min)
        kwargs = {self.cache_name: cache, "use_cache": True, "logits_to_keep": 1}
        if self.cache_position:
            kwargs["cache_position"] = slots
        with gqa_decoding(model, self.gqa):
            return model(input_ids=ids, attention_mask=mask, position_ids=positions, **kwargs).logits[:, -1]


class StaticDecoder:
    """The KV cache and the step's static buffers for `rows` sequences of at most `length` tokens."""

    def __init__(self, model: torch.nn.Module, rows: int, length: int, device: torch.device):
        self.model, self.length, self.device = model, length, device
        self.call = ForwardCall(model)
        self.graph = None  # node.generation.graphs.StepGraph once captured
        self.capture_error: str | None = None  # why a capture failed (graphs.capture)
        self._allocate(rows)

    def _allocate(self, rows: int) -> None:
        self.rows = self.full_rows = rows
        self.cache = KVCache(config=self.model.config, max_cache_len=self.length)
        self.tokens = torch.zeros((rows, 1), dtype=torch.long, device=self.device)
        self.positions = torch.zeros((rows, 1), dtype=torch.long, device=self.device)
        self.attend = torch.zeros((rows, self.length), dtype=torch.bool, device=self.device)
        self.slot = torch.zeros((1,), dtype=torch.long, device=self.device)  # the cache slot the step writes

    def compact(self, keep: torch.Tensor) -> None:
        """Keep only rows `keep` (eager decoders only: a graph's buffers cannot shrink). The KV cache is cut
        with transformers' own `reorder_cache`; the next prefill allocates the full batch again."""
        self.cache.reorder_cache(keep)
        self.tokens, self.positions, self.attend = self.tokens[keep], self.positions[keep], self.attend[keep]
        self.rows = len(keep)

    def attention(self):
        """The SDPA kernels its steps run with (attention_context)."""
        return attention_context(self.device)

    def step_forward(self) -> torch.Tensor:
        """The decode step on the static buffers (what a CUDA graph captures)."""
        return self.call(self.model, self.cache, self.tokens, self.positions,
                         self.attend[:, None, None, :], self.slot)

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Left-padded prompts ids/mask [rows, P] into slots 0..P−1; the last position's logits [rows, V]."""
        if self.rows != self.full_rows:  # compacted by the previous call
            self._allocate(self.full_rows)
        self.cache.reset()
        p = ids.shape[1]
        self.attend.zero_()
        self.attend[:, :p] = mask
        causal = torch.ones((p, self.length), dtype=torch.bool, device=self.device).tril()
        own = torch.eye(p, self.length, dtype=torch.bool, device=self.device)
        attend = (self.attend[:, None, None, :] & causal) | own  # [rows, 1, P, length]
        positions = (mask.long().cumsum(-1) - 1).clamp_min(0)
        self.positions.copy_(positions[:, -1:])
        slots = torch.arange(p, device=self.device)
        return self.call(self.model, self.cache, ids, positions, attend, slots)

    def step(self, tokens: torch.Tensor, slot: int) -> torch.Tensor:
        """Feed `tokens` [rows] at cache slot `slot`; the next logits [rows, V]."""
        self.tokens.copy_(tokens.unsqueeze(-1))
        self.positions.add_(1)
        self.attend[:, slot] = True
        self.slot.fill_(slot)
        if self.graph is not None:
            return self.graph.replay()
        return self.step_forward()


def reserve_bytes(model: torch.nn.Module, rows: int, length: int, decoders: int, graphs: bool = False) -> int:
    """What `decoders` StaticDecoders of rows × length allocate (KV caches), plus one step's float32 logits
    and the sampling's copies of them (log-probabilities, probabilities, their float64 cumulative sum); with
    CUDA graphs, each decoder's graph also keeps a private memory pool holding one step's intermediates
    (its logits in float32 at most, and a layer's activations: 4 × hidden + 2 × MLP width a row)."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    size = next(model.parameters()).element_size()
    kv = 2 * config.num_hidden_layers * heads * head_dim * size
    layer = 4 * config.hidden_size + 2 * getattr(config, "intermediate_size", 0)
    pool = rows * (4 * config.vocab_size + layer * size)
    return decoders * (kv * rows * length + (pool if graphs else 0)) + (4 + 4 + 4 + 8) * rows * config.vocab_size


@dataclass
class Decoded:
    tokens: torch.Tensor  # [rows, steps] on the CPU: sampled ids, padding after a row's EOS
    logprobs: torch.Tensor  # [rows, steps] float32: log μ of each sampled token


class DecodeLoop:
    """Decodes batches of prompts on one model, keeping a few StaticDecoders (and their graphs) for reuse."""

    KEEP = 2  # decoders kept at once, one per rows bucket (a round's and the held-out evaluation's)

    def __init__(self, *, cuda_graphs: bool = True, keep: int | None = None):
        self.cuda_graphs = cuda_graphs
        self._keep = keep  # decoders kept between batches; None: KEEP with CUDA graphs, else 0 (module doc)
        self._decoders: OrderedDict[tuple, StaticDecoder] = OrderedDict()  # (id(model), rows) → decoder
        self.built = 0  # decoders built so far (on a GPU each is a graph capture)

    def keep(self, device: torch.device) -> int:
        """How many decoders are kept between batches on `device`."""
        if self._keep is not None:
            return self._keep
        return self.KEEP if self.cuda_graphs and device.type == "cuda" else 0

    def bucket(self, rows: int, length: int, device: torch.device) -> tuple[int, int]:
        """The (rows, length) a decoder for this batch has: bucketed for CUDA graphs, else rows exact."""
        if self.cuda_graphs and device.type == "cuda":
            return max(8, 1 << (rows - 1).bit_length()), -(-length // 128) * 128
        return rows, -(-length // 16) * 16

    def mode(self, device: torch.device) -> str:
        """How decode steps run on `device`, and why (module doc): "graphs" or "eager: <why>"."""
        if device.type != "cuda":
            return "eager: no CUDA"
        if not self.cuda_graphs:
            return "eager: generation.hf.cuda_graphs is false"
        failed = [d.capture_error for d in self._decoders.values() if d.capture_error]
        return f"eager: capture failed: {failed[-1]}" if failed else "graphs"

    def decoder(self, model: torch.nn.Module, rows: int, length: int) -> StaticDecoder:
        """The kept decoder of this rows bucket when its cache is long enough, else a new one in its place."""
        device = next(model.parameters()).device
        graphs = self.cuda_graphs and device.type == "cuda"
        rows, length = self.bucket(rows, length, device)
        key = (id(model), rows)
        dec = self._decoders.get(key)
        if dec is not None and dec.length >= length:
            self._decoders.move_to_end(key)
            return dec
        self._decoders.pop(key, None)  # too short: freed before its longer replacement is allocated
        keep = self.keep(device)
        while self._decoders and len(self._decoders) >= keep:
            self._decoders.popitem(last=False)
        dec = StaticDecoder(model, rows, length, device)
        self.built += 1
        if graphs:
            from node.generation.graphs import capture

            capture(dec)
        if keep:
            self._decoders[key] = dec
        return dec

    def clear(self) -> None:
        self._decoders.clear()

    @torch.no_grad()
    def run(self, model: torch.nn.Module, prompts: list[list[int]], *, max_new_tokens: int, temperature: float,
            top_p: float, eos_id: int, pad_id: int, greedy: bool = False) -> Decoded:
        """Sample up to `max_new_tokens` after each prompt (token ids, no padding) in one batch."""
        if not prompts or min(len(p) for p in prompts) == 0:
            raise ValueError("every prompt needs at least one token")
        n, p = len(prompts), max(len(x) for x in prompts)
        dec = self.decoder(model, n, p + max_new_tokens)
        dev = dec.device
        ids = torch.full((dec.full_rows, p), pad_id, dtype=torch.long)
        mask = torch.zeros((dec.full_rows, p), dtype=torch.bool)
        for i, prompt in enumerate(prompts):
            ids[i, p - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
            mask[i, p - len(prompt):] = True
        out_tokens = torch.full((dec.full_rows, max_new_tokens), pad_id, dtype=torch.long, device=dev)
        out_logp = torch.zeros((dec.full_rows, max_new_tokens), dtype=torch.float32, device=dev)
        done = torch.zeros(dec.full_rows, dtype=torch.bool, device=dev)
        done[n:] = True  # bucket padding rows
        rows = torch.arange(dec.full_rows, device=dev)  # the output row of each decoder row (compaction reorders)
        check_every = 8 if dev.type == "cuda" else 1  # a host sync per check
        with attention_context(dev):
            logits = dec.prefill(ids.to(dev), mask.to(dev))
            for t in range(max_new_tokens):
                token, logp = sample_next(logits, temperature, top_p, greedy=greedy)
                token = token.masked_fill(done, pad_id)
                out_tokens[rows, t] = token
                out_logp[rows, t] = logp
                done |= token == eos_id
                if t + 1 == max_new_tokens or ((t + 1) % check_every == 0 and bool(done.all())):
                    break
                if dec.graph is None and 4 * int(done.sum()) >= dec.rows:  # a quarter finished: drop them
                    keep = (~done).nonzero().squeeze(-1)
                    dec.compact(keep)
                    rows, done, token = rows[keep], done[keep], token[keep]
                logits = dec.step(token, p + t)
        steps = t + 1
        return Decoded(out_tokens[:n, :steps].cpu(), out_logp[:n, :steps].cpu())
