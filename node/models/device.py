"""Device and precision of the policy: where it trains, and in which dtype its forward passes run.

`place(model, cfg)` (cfg: the `train.*` fields of node.models.config.PlacementConfig) moves the
model to `train.device`, enables gradient checkpointing when asked, and installs mixed precision:

  autocast  the innermost transformers model's `forward` is wrapped in `torch.autocast(device,
            dtype)` (the pattern accelerate uses), so every forward pass — HF generation, scoring,
            the training step, held-out evaluation, and any forward a loss adds — runs in bf16 or
            fp16 while the weights and the optimizer state stay in `model.dtype`. The wrapper is a
            bound method of the model, so `copy.deepcopy(model)` rebinds it to the copy.
  fp16      float16's narrow range needs a loss scale. The wrapped forward returns float32 logits
            whose gradient is multiplied by S on the way back (so small gradients survive the
            float16 backward pass); a hook on every trainable parameter divides its gradient by S
            before it is accumulated, so `.grad`, gradient clipping and the `grad_norm` metric see
            true values. `attach(optimizer)` adds a step pre-hook that skips a step whose
            gradients are not finite (and halves S) and doubles S after `GROWTH_INTERVAL` good steps
            — torch.amp.GradScaler's policy, without changes to the training step. A loss term
            that reaches the parameters without passing through the logits would be divided by S
            too; NodeConfig therefore refuses float16 autocast in federated mode (FedProx).

`resolve_device("cuda")` on a machine where torch sees no GPU raises DeviceUnavailable, which
the CLI prints as one line (exit 2).
"""

from __future__ import annotations

import contextlib
import logging
import types
from dataclasses import dataclass, field

import torch

log = logging.getLogger(__name__)

INITIAL_SCALE = 2.0**16
GROWTH_INTERVAL = 200  # good steps before the loss scale doubles (one step per round)


class DeviceUnavailable(ValueError):
    """The configured device does not exist on this machine (message: one line)."""


def resolve_device(spec: str) -> torch.device:
    """`auto` → the first CUDA device when torch sees one, else cpu; `cuda[:N]` only when it exists."""
    if spec == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    if spec == "cpu":
        return torch.device("cpu")
    device = torch.device(spec)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            build = f"torch {torch.__version__}" + (" (a CPU-only build)" if torch.version.cuda is None else "")
            raise DeviceUnavailable(f"train.device is {spec!r} but torch sees no CUDA device ({build}); "
                                    "install a CUDA build of torch and its driver, or set train.device: cpu or auto")
        index = device.index or 0
        if index >= torch.cuda.device_count():
            raise DeviceUnavailable(f"train.device is {spec!r} but torch sees {torch.cuda.device_count()} CUDA "
                                    f"device(s) (cuda:0..cuda:{torch.cuda.device_count() - 1})")
        return torch.device("cuda", index)
    raise DeviceUnavailable(f"train.device {spec!r} is not auto, cpu, cuda or cuda:N")


@dataclass
class Precision:
    """The device and autocast dtype a model runs with; `scale` is the fp16 loss scale (None otherwise)."""

    device: torch.device
    dtype: torch.dtype | None = None  # autocast dtype; None = no autocast
    scale: float | None = None
    good_steps: int = 0
    skipped_steps: int = 0
    _hooks: list = field(default_factory=list, repr=False)

    def attach(self, optimizer: torch.optim.Optimizer) -> None:
        """Skip non-finite steps and adapt the fp16 loss scale (no-op without one). Call for every new optimizer."""
        if self.scale is not None:
            self._hooks.append(optimizer.register_step_pre_hook(self._pre_step))

    def _pre_step(self, optimizer, _args, _kwargs) -> None:
        grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        finite = bool(torch.stack([torch.isfinite(g).all() for g in grads]).all()) if grads else True
        if not finite:  # an overflow under the current scale: drop these gradients, step nothing
            for g in optimizer.param_groups:
                for p in g["params"]:
                    p.grad = None
            self.scale /= 2.0
            self.good_steps = 0
            self.skipped_steps += 1
            log.warning("float16 gradients overflowed: step skipped, loss scale now %g", self.scale)
            return
        self.good_steps += 1
        if self.good_steps >= GROWTH_INTERVAL:
            self.scale *= 2.0
            self.good_steps = 0


class _ScaleGrad(torch.autograd.Function):
    """Identity forward; multiplies the incoming gradient by the current loss scale."""

    @staticmethod
    def forward(ctx, x, precision):
        ctx.precision = precision
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.precision.scale, None


def _autocast_forward(self, *args, **kwargs):
    """The model class's own forward under autocast (bound to the model as its `forward`)."""
    precision: Precision = self._rlswarm_precision
    with torch.autocast(precision.device.type, dtype=precision.dtype, enabled=precision.dtype is not None):
        out = type(self).forward(self, *args, **kwargs)
    if precision.scale is not None and torch.is_grad_enabled() and getattr(out, "logits", None) is not None:
        out.logits = _ScaleGrad.apply(out.logits.float(), precision)
    return out


def _innermost(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model under a peft wrapper (whose forward every path ends in), or the model."""
    return model.get_base_model() if hasattr(model, "peft_config") else model


def innermost(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model a peft wrapper adapts in place (its LoRA layers included), or the model."""
    return _innermost(model)


def autocast_of(model: torch.nn.Module):
    """The mixed-precision context the model's own forward runs under, for passes that call its parts
    (body, output head) directly (node.round.logprobs); a no-op context without autocast."""
    precision: Precision | None = getattr(_innermost(model), "_rlswarm_precision", None)
    if precision is None or precision.dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(precision.device.type, dtype=precision.dtype)


def loss_scaled(model: torch.nn.Module, logits: torch.Tensor) -> torch.Tensor:
    """Logits whose gradient carries the float16 loss scale, as the model's own forward returns them."""
    precision: Precision | None = getattr(_innermost(model), "_rlswarm_precision", None)
    if precision is not None and precision.scale is not None and torch.is_grad_enabled():
        return _ScaleGrad.apply(logits.float(), precision)
    return logits


def place(model: torch.nn.Module, cfg) -> Precision:
    """Move `model` to cfg.device, enable gradient checkpointing and autocast as configured (see module doc)."""
    device = resolve_device(cfg.device)
    model.to(device)
    inner = _innermost(model)
    if cfg.gradient_checkpointing is True:  # auto: decided by measurement (node.round.sizing)
        set_checkpointing(model, True)
    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, None: None}[cfg.autocast]
    precision = Precision(device, dtype, INITIAL_SCALE if dtype is torch.float16 else None)
    if dtype is not None:
        inner._rlswarm_precision = precision
        inner.forward = types.MethodType(_autocast_forward, inner)
        if precision.scale is not None:
            for p in model.parameters():
                if p.requires_grad:
                    p.register_hook(lambda g, pr=precision: g / pr.scale)
    return precision


def set_checkpointing(model: torch.nn.Module, on: bool) -> None:
    """Turn gradient (activation) checkpointing of the model's layers on or off (transformers ≥ 5.20 names
    it activation checkpointing; the older name stays for earlier versions)."""
    inner = _innermost(model)
    if on == checkpointing(model):
        return
    if on:
        enable = getattr(inner, "activation_checkpointing_enable", None)
        if enable is not None:
            enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            inner.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        disable = getattr(inner, "activation_checkpointing_disable", None)
        (disable or inner.gradient_checkpointing_disable)()


def checkpointing(model: torch.nn.Module) -> bool:
    """Whether gradient checkpointing is on (transformers ≥ 5 names it activation checkpointing)."""
    inner = _innermost(model)
    flag = getattr(inner, "is_activation_checkpointing", None)
    return bool(flag if flag is not None else getattr(inner, "is_gradient_checkpointing", False))


def describe(model: torch.nn.Module, precision: Precision) -> str:
    """One line for the node's start-up banner, e.g. `cuda:0 · bfloat16 weights · autocast float16`."""
    weights = next(model.parameters()).dtype
    parts = [str(precision.device), f"{str(weights).removeprefix('torch.')} weights"]
    if precision.dtype is not None:
        parts.append(f"autocast {str(precision.dtype).removeprefix('torch.')}")
    if checkpointing(model):
        parts.append("gradient checkpointing")
    return " · ".join(parts)
