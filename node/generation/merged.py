"""LoRA generation at the base model's speed: a copy of the model with the adapter merged into its weights.

A peft model computes every adapted linear layer as W x + s·B(A x): three matmuls and a handful of
extra kernels per layer. `MergedCopy` holds a plain transformers model whose adapted layers carry
W + s·B A instead (peft's own `merge_and_unload` builds it from a copy; peft's `get_delta_weight`
refreshes it), so a decode step costs what the base model's does. Every parameter that LoRA does
not adapt (embeddings, norms, the output head) is shared with the training model, not copied: the
copy costs the adapted layers' weights once more.

The copy is refreshed lazily: `mark_stale()` after an optimizer step (or a weight load), and the
next `model()` recomputes the merged weights in place (`copy_`, so a captured CUDA graph stays
valid). The training model's own weights are never touched — merging and unmerging in place would
drift a bfloat16 base by a rounding error every round.

Precision: in float32 the merged model's log-probabilities equal the adapter's to float error
(tests/unit/node/test_decode_loop.py). On a bfloat16 (or float16) base the merged weight is rounded to
that dtype, so an adapter update smaller than half a rounding step of a weight is not seen by
generation until it grows; the recorded log μ is the merged model's (the distribution actually
sampled), so the importance ratio accounts for the difference. `generation.hf.merge_lora: false`
generates through the adapter instead (exact, slower).
"""

from __future__ import annotations

import copy

import torch


def lora_layers(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """name → peft LoRA layer, under the names the merged copy's plain modules have."""
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    return {name: m for name, m in base.named_modules() if isinstance(m, LoraLayer)}


class MergedCopy:
    """A plain model equal to the peft `model` with its active adapter merged, kept in step on demand."""

    def __init__(self, model: torch.nn.Module):
        self.source = model
        self.adapter = model.active_adapter
        layers = lora_layers(model)
        adapted = {id(p) for m in layers.values() for p in m.parameters()}
        shared = {id(p): p for p in model.parameters() if id(p) not in adapted}
        shared.update({id(b): b for b in model.buffers()})
        inner = model.get_base_model()
        precision = getattr(inner, "_rlswarm_precision", None)  # node.models.device: shared, not copied
        if precision is not None:
            shared[id(precision)] = precision
        clone = copy.deepcopy(model, memo=shared)
        self.model = clone.merge_and_unload()
        self.model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self._targets = {name: self.model.get_submodule(name) for name in layers}
        self.stale = False

    def mark_stale(self) -> None:
        self.stale = True

    @torch.no_grad()
    def refresh(self) -> None:
        """Merged weights from the training model's current base weights and adapter (in place)."""
        for name, layer in lora_layers(self.source).items():
            base = layer.get_base_layer().weight
            delta = layer.get_delta_weight(self.adapter)
            target = self._targets[name].weight
            target.copy_((base.float() + delta.float()).to(target.dtype))
        self.stale = False

    def __call__(self) -> torch.nn.Module:
        """The merged model, refreshed first if the training model changed since."""
        if self.stale:
            self.refresh()
        return self.model
