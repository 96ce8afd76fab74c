"""What the decode loop (node.generation.decode) needs to behave the same on every transformers it supports
(4.57 to 5.x: a GPU box rarely has the version this project is developed on; `tests/version_matrix.py` runs
the decode and scoring tests on 4.57.1, 5.0.0 and the development version).

  KVCache           a StaticCache that stores each layer's keys in its values' dtype. Under autocast with
                    float32 weights, RoPE (float32 cos/sin) makes K float32 while V comes out of a bfloat16
                    matmul; transformers 4.57 and 5.0 allocate both cache tensors in K's dtype and then fail
                    writing V (`index_copy_(): ... Float and BFloat16`). Attention under autocast runs in the
                    low precision anyway (SDPA casts K to it), so storing K there changes no result.
  decode_attention  the `sdpa` attention of one query token per row (a decode step) in a model with
                    grouped-query attention: the n_rep query heads that share a KV head become that head's n_rep
                    query rows (transformers 5.x's own `pack_gqa`), so the cache's K and V are read as they are.
                    4.57 and 5.0 expand both to every query head at every step when a mask is given (`repeat_kv`:
                    Qwen2.5-1.5B's 12 query / 2 KV heads read the whole cache 6 times). Any other call (a
                    prompt's prefill, a scoring pass) goes to transformers' own `sdpa` unchanged.
  gqa_decoding      the context in which a model's `sdpa` layers use decode_attention: its config names the
                    registered implementation `rlswarm_sdpa` (decode_attention, with sdpa's mask function) for
                    the duration, and `sdpa` again after. A forward that another thread runs meanwhile (a teacher
                    scoring for peers) gets transformers' own sdpa result: only one-token queries differ in path.
"""

from __future__ import annotations

import contextlib

import torch
from transformers import StaticCache

NAME = "rlswarm_sdpa"


class KVCache(StaticCache):
    """StaticCache whose keys are stored in the values' dtype (module doc)."""

    def update(self, key_states, value_states, *args, **kwargs):
        if key_states.dtype != value_states.dtype:
            key_states = key_states.to(value_states.dtype)
        return super().update(key_states, value_states, *args, **kwargs)


def _stock_sdpa():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward


def decode_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                     **kwargs):
    """transformers' attention-function signature: query [B, Hq, q, D], key/value [B, Hkv, L, D] →
    ([B, q, Hq, D], None)."""
    n_rep = getattr(module, "num_key_value_groups", 1)
    if query.shape[2] != 1 or n_rep == 1 or kwargs.get("output_attentions") or kwargs.get("position_bias") is not None:
        return _stock_sdpa()(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                             is_causal=is_causal, **kwargs)
    batch, heads, _, dim = query.shape
    packed = query.reshape(batch, heads // n_rep, n_rep, dim)  # query head h reads KV head h // n_rep (repeat_kv)
    mask = attention_mask
    if mask is not None:
        mask = mask[..., : key.shape[-2]]
        if mask.shape[1] != 1:  # one mask per query head: the same regrouping
            mask = mask.reshape(mask.shape[0], heads // n_rep, n_rep, mask.shape[-1])
    out = torch.nn.functional.scaled_dot_product_attention(packed, key, value, attn_mask=mask, dropout_p=dropout,
                                                           scale=scaling, is_causal=False)
    return out.reshape(batch, heads, 1, value.shape[-1]).transpose(1, 2).contiguous(), None


_registered = False


def _register() -> None:
    global _registered
    if _registered:
        return
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    type(ALL_ATTENTION_FUNCTIONS).register(NAME, decode_attention)
    type(ALL_MASK_ATTENTION_FUNCTIONS).register(NAME, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    _registered = True


def uses_gqa(model: torch.nn.Module) -> bool:
    """Whether the model's `sdpa` attention has fewer KV heads than query heads (decode_attention applies)."""
    config = model.config
    kv = getattr(config, "num_key_value_heads", None)
    return getattr(config, "_attn_implementation", None) in ("sdpa", NAME) and kv is not None \
        and kv < config.num_attention_heads


@contextlib.contextmanager
def gqa_decoding(model: torch.nn.Module, enabled: bool):
    """The model's sdpa layers run decode_attention inside (module doc); nothing changes when not `enabled`."""
    config = model.config
    if not enabled or config._attn_implementation != "sdpa":
        yield
        return
    _register()
    config._attn_implementation = NAME
    try:
        yield
    finally:
        config._attn_implementation = "sdpa"
