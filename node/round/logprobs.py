"""Score completions under this node's own model: per-token log π_θ(y_t | x, y_<t) / T.

The same temperature-scaled convention as generation (docs/ARCHITECTURE.md §6), so that a local, on-policy
completion gets ratio exp(logp − logp_beh) = 1 up to float error. Rows are packed as
`prompt ‖ completion`, right-padded; the hidden state at position p predicts token p + 1.

Memory: logits are computed only where a completion token is predicted, and there only in chunks
of rows that hold at most `LOGIT_CHUNK_BYTES` of float32 logits (64 MiB, on a CPU and a GPU alike: a chunk
peaks at about 3× its size without gradients and 4× with them — 1 GiB at 256 MiB, measured by
tests/unit/node/test_vocab_memory.py — and 64 MiB is still a 110 × hidden × 151,936 matrix product,
enough to keep a GPU busy): the model's body gives the hidden
states [B, S, H], the positions that predict completion tokens are picked out ([N, H], N real
completion tokens), and each chunk goes through the output head, the temperature and a float32
log-softmax, keeping only each row's target log-probability. With gradients, every chunk is
recomputed in the backward pass (torch.utils.checkpoint), so what the step keeps of the head is the
[N, H] hidden states and [N] log-probabilities — never a [B, T, V] tensor, whatever the vocabulary.
A model whose logits are not its output head applied to its body's last hidden state (softcapping,
logit scaling) is scored by its own full forward instead (`head_split`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.checkpoint import checkpoint

from node.models.device import autocast_of, innermost, loss_scaled

LOGIT_CHUNK_BYTES = {"cpu": 64 << 20, "cuda": 64 << 20}  # float32 logits per chunk of completion tokens
_LOGIT_POSTPROCESSING = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")


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


def head_split(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module] | None:
    """(body, output head) when logits = head(body(...).last_hidden_state) exactly, else None."""
    inner = innermost(model)
    if not (hasattr(inner, "get_decoder") and hasattr(inner, "get_output_embeddings")):
        return None
    config = getattr(inner, "config", None)
    if any(getattr(config, k, None) not in (None, 1, 1.0) for k in _LOGIT_POSTPROCESSING):
        return None
    body, head = inner.get_decoder(), inner.get_output_embeddings()
    if body is inner or head is None:
        return None
    return body, head


def target_logprobs(model: torch.nn.Module, head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor,
                    temperature: float) -> torch.Tensor:
    """log softmax(head(hidden) / T)[target] for hidden [N, H], targets [N] → [N] float32, in chunks."""

    def chunk(h: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        with autocast_of(model):
            logits = head(h)
        z = loss_scaled(model, logits).float() / temperature
        return z.gather(-1, t.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(z, dim=-1)

    budget = LOGIT_CHUNK_BYTES.get(hidden.device.type, LOGIT_CHUNK_BYTES["cpu"])
    per_chunk = max(1, budget // (4 * head.weight.shape[0]))
    parts = []
    for lo in range(0, hidden.shape[0], per_chunk):
        h, t = hidden[lo : lo + per_chunk], targets[lo : lo + per_chunk]
        parts.append(checkpoint(chunk, h, t, use_reentrant=False) if torch.is_grad_enabled() else chunk(h, t))
    return torch.cat(parts) if parts else hidden.new_zeros(0, dtype=torch.float32)


def score_rows(
    model: torch.nn.Module, rows: list[TokenRow], temperature: float, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """log π_θ of every completion token: logp [B, T] (differentiable if grad is on), mask [B, T]."""
    if any(len(r.prompt_ids) == 0 for r in rows):
        raise ValueError("every row needs at least one prompt token")
    input_ids, attention, pred_pos, mask = pack_rows(rows, pad_id)
    device = next(model.parameters()).device
    split = head_split(model)
    if split is None:
        return _score_full_logits(model, rows, input_ids, attention, pred_pos, mask, temperature)
    body, head = split
    b_idx, t_idx = mask.bool().nonzero(as_tuple=True)  # the real completion tokens, row-major: N of them
    targets = torch.tensor([tok for r in rows for tok in r.completion_ids], dtype=torch.long)
    with autocast_of(model):
        hidden = body(input_ids=input_ids.to(device), attention_mask=attention.to(device)).last_hidden_state
    b_idx, t_idx = b_idx.to(device), t_idx.to(device)
    picked = hidden[b_idx, pred_pos.to(device)[b_idx, t_idx]]  # [N, H]
    lp = target_logprobs(model, head, picked, targets.to(device), temperature)
    logp = torch.zeros(mask.shape, dtype=torch.float32, device=device).index_put((b_idx, t_idx), lp)
    return logp, mask.to(device)


def _score_full_logits(model, rows, input_ids, attention, pred_pos, mask, temperature):
    """The model's own forward and its [B, S, V] logits: for models whose head is not a plain projection."""
    device = next(model.parameters()).device
    logits = model(input_ids=input_ids.to(device), attention_mask=attention.to(device)).logits
    picked = logits.gather(1, pred_pos.to(device).unsqueeze(-1).expand(-1, -1, logits.shape[-1]))  # [B, T, V]
    logprobs = torch.log_softmax(picked.float() / temperature, dim=-1)
    targets = torch.zeros_like(pred_pos)
    for i, r in enumerate(rows):
        targets[i, : len(r.completion_ids)] = torch.tensor(r.completion_ids, dtype=torch.long)
    logp = logprobs.gather(-1, targets.to(device).unsqueeze(-1)).squeeze(-1)  # [B, T]
    mask = mask.to(device)
    return logp * mask, mask
