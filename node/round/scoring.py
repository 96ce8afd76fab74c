"""Score completions under this node's own model: per-token log π_θ(y_t | x, y_<t) / T.

The same temperature-scaled convention as generation (docs/ARCHITECTURE.md §6), so that a local, on-policy
completion gets ratio exp(logp − logp_beh) = 1 up to float error. Rows are packed as
`prompt ‖ completion`, right-padded; the logit at position p predicts token p + 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class TokenRow:
    """One (prompt, completion) pair in *this node's* tokenization."""

    prompt_ids: list[int]
    completion_ids: list[int]


def pack_rows(rows: list[TokenRow], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded inputs plus the gather index of each completion token.

    Returns input_ids [B, S], attention_mask [B, S], pred_pos [B, T] (position whose logits predict
    completion token t; 0 where padded) and mask [B, T] (1.0 on real completion tokens).
    """
    seq_len = max(len(r.prompt_ids) + len(r.completion_ids) for r in rows)
    comp_len = max(max(len(r.completion_ids) for r in rows), 1)
    input_ids = torch.full((len(rows), seq_len), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), seq_len), dtype=torch.long)
    pred_pos = torch.zeros((len(rows), comp_len), dtype=torch.long)
    mask = torch.zeros((len(rows), comp_len))
    for i, r in enumerate(rows):
        ids = r.prompt_ids + r.completion_ids
        input_ids[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention[i, : len(ids)] = 1
        c = len(r.completion_ids)
        pred_pos[i, :c] = torch.arange(len(r.prompt_ids) - 1, len(r.prompt_ids) - 1 + c)
        mask[i, :c] = 1.0
    return input_ids, attention, pred_pos, mask


def score_rows(
    model: torch.nn.Module, rows: list[TokenRow], temperature: float, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """log π_θ of every completion token: logp [B, T] (differentiable if grad is on), mask [B, T]."""
    if any(len(r.prompt_ids) == 0 for r in rows):
        raise ValueError("every row needs at least one prompt token")
    input_ids, attention, pred_pos, mask = pack_rows(rows, pad_id)
    device = next(model.parameters()).device
    logits = model(input_ids=input_ids.to(device), attention_mask=attention.to(device)).logits
    # Only the positions that predict completion tokens: [B, T, V]
    picked = logits.gather(1, pred_pos.to(device).unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
    logprobs = torch.log_softmax(picked.float() / temperature, dim=-1)
    targets = torch.zeros_like(pred_pos)
    for i, r in enumerate(rows):
        targets[i, : len(r.completion_ids)] = torch.tensor(r.completion_ids, dtype=torch.long)
    logp = logprobs.gather(-1, targets.to(device).unsqueeze(-1)).squeeze(-1)  # [B, T]
    mask = mask.to(device)
    return logp * mask, mask
