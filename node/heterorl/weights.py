"""A model's trainable weights as bytes and back: what a learner broadcasts and a sampler loads (docs/PROTOCOL.md §10).

    full   safetensors of the model's state dict, one tensor per storage (a tied output head is sent
           once, under its first name, and re-tied on load)
    lora   safetensors of the peft adapter's tensors (`get_peft_model_state_dict`): the frozen base is
           never sent; the sampler must hold the same base model and LoRA config

Loading checks everything before it touches the model: the bytes parse as safetensors
(`weights_decode`), the tensor names, shapes and dtypes are exactly the ones this model would send
(`weights_mismatch`), every value is finite (`weights_nonfinite`). A rejected file leaves the
model as it was. Serialisation is deterministic, so the same weights always have the same digest.
"""

from __future__ import annotations

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save


class WeightsRejected(ValueError):
    """Weight bytes this model cannot load; `reason` is the drop-counter label."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def weights_format(model: torch.nn.Module) -> str:
    return "lora" if hasattr(model, "peft_config") else "full"


def _tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The tensors this model sends, by name (no duplicate storage)."""
    if weights_format(model) == "lora":
        from peft import get_peft_model_state_dict

        items = get_peft_model_state_dict(model).items()
    else:
        items = model.state_dict().items()
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, t in items:
        ptr = t.untyped_storage().data_ptr() if t.numel() else -len(out) - 1
        if ptr in seen:  # a tied alias (e.g. lm_head = embed_tokens): sent once
            continue
        seen.add(ptr)
        out[name] = t.detach()
    return out


def export_weights(model: torch.nn.Module) -> bytes:
    """The model's weights in its format (module docstring), as safetensors bytes."""
    return st_save({k: v.to("cpu").contiguous() for k, v in _tensors(model).items()})


@torch.no_grad()
def apply_weights(model: torch.nn.Module, data: bytes, fmt: str) -> None:
    """Load weight bytes into `model` in place, or raise WeightsRejected without changing it."""
    if fmt != weights_format(model):
        raise WeightsRejected("format", f"{fmt} weights for a {weights_format(model)} model")
    try:
        incoming = st_load(bytes(data))
    except Exception as exc:  # safetensors raises its own error types on malformed headers
        raise WeightsRejected("weights_decode", str(exc)[:200]) from None
    own = _tensors(model)
    if set(incoming) != set(own):
        extra, missing = sorted(set(incoming) - set(own)), sorted(set(own) - set(incoming))
        raise WeightsRejected("weights_mismatch", f"unexpected {extra[:3]}, missing {missing[:3]}")
    for name, t in incoming.items():
        if t.shape != own[name].shape or t.dtype != own[name].dtype:
            raise WeightsRejected("weights_mismatch", f"{name}: {tuple(t.shape)} {t.dtype}, "
                                  f"expected {tuple(own[name].shape)} {own[name].dtype}")
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise WeightsRejected("weights_nonfinite", name)
    if fmt == "lora":
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, {k: t.to(own[k].device) for k, t in incoming.items()})
        return
    for name, t in incoming.items():  # state_dict tensors share the parameters' storage
        own[name].copy_(t.to(own[name].device))
