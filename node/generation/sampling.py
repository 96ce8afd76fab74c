"""One decode step's sampling: the next token of every row and its log μ, from that step's logits alone.

The convention of node.generation.base: z = logits / T in float32, log μ(y) = z[y] − logsumexp(z) —
the temperature-scaled distribution, *not* renormalised over the top-p nucleus (as the `hf-generate`
backend and TRL report it; the scorer computes the same quantity). With top_p < 1 the token is drawn
from that distribution restricted to the nucleus and renormalised, exactly as transformers'
TopPLogitsWarper builds it: sort ascending, drop the tokens whose cumulative probability is
≤ 1 − top_p, always keep the most likely one.

The draw inverts the cumulative distribution: u ~ U(0, Σ p) per row, the token is the first whose
cumulative mass (summed in float64, so that no token's share is lost to rounding in a 151,936-entry
vocabulary) exceeds u. It takes a handful of passes over [rows, vocab] — fewer than
`torch.multinomial` or an exponential race, whose exponential draws are slow on a CPU — and no host
synchronisation on a GPU. Nothing of shape [rows, steps, vocab] exists: each step's [rows, vocab]
tensors are dropped after it.
"""

from __future__ import annotations

import torch


def nucleus(z: torch.Tensor, top_p: float) -> torch.Tensor:
    """z with the tokens outside the top-p nucleus set to −inf (transformers' TopPLogitsWarper rule)."""
    sorted_z, order = torch.sort(z, dim=-1, descending=False)
    cumulative = sorted_z.softmax(dim=-1).cumsum(dim=-1)
    remove = cumulative <= (1 - top_p)
    remove[..., -1:] = False  # the most likely token always stays
    return z.masked_fill(remove.scatter(-1, order, remove), float("-inf"))


def sample_next(logits: torch.Tensor, temperature: float, top_p: float = 1.0, *, greedy: bool = False,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(token [rows] long, log μ of it [rows] float32) from one step's logits [rows, vocab].

    greedy: the argmax (the mode; its log μ is still the temperature-scaled one)."""
    z = logits.float()
    if temperature != 1.0:
        z = z / temperature
    logp_all = z.log_softmax(dim=-1)
    if greedy:
        token = z.argmax(dim=-1)
    else:
        cdf = (nucleus(logp_all, top_p) if top_p < 1.0 else logp_all).exp().double().cumsum_(dim=-1)
        u = torch.rand((z.shape[0], 1), dtype=torch.float64, device=z.device, generator=generator) * cdf[:, -1:]
        token = torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_(max=z.shape[-1] - 1)
    return token, logp_all.gather(-1, token.unsqueeze(-1)).squeeze(-1)
