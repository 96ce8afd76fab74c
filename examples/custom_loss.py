"""A loss of your own, by import path: truncated-importance-sampling policy gradient.

Use it from a node's YAML (every key besides `name` is a keyword argument of the function):

    loss:
      name: examples/custom_loss.py:truncated_pg     # or mypkg.losses:truncated_pg if importable
      clip: 2.0

    ℓ_{i,t} = −sg(min(π_θ/μ, clip)) · A_i · log π_θ(y_t),   summed over the step's tokens / its token count

The two things every loss must get right are marked (1) and (2) below.
"""

from __future__ import annotations

from losses.base import LossInputs, LossOutputs, behaviour_view, loss_metrics, safe_exp


def truncated_pg(inputs: LossInputs, *, clip: float = 2.0) -> LossOutputs:
    # (1) Read μ only through behaviour_view: it validates the inputs, upcasts to float32, zeroes
    #     padding, and gives rows sampled with another tokenizer their chunk ratio (ARCHITECTURE §6).
    view = behaviour_view(inputs)
    weight = safe_exp(view.log_ratio).clamp(max=clip).detach()  # [B, T] truncated π_θ/μ
    per_token = -weight * view.advantages[:, None] * view.logp  # [B, T]
    # (2) Divide by the WHOLE optimizer step's totals, not this micro-batch's: the trainer splits a
    #     step into micro-batches and adds their losses, which then sum to exactly the full-batch loss.
    loss = (per_token * view.m).sum() / max(view.totals.tokens, 1)
    clipped = (safe_exp(view.log_ratio) > clip) & view.valid
    return LossOutputs(loss, loss_metrics(inputs, view, weight, view.valid, clipped))
