"""The cross-tokenizer chunk weight against a known π and μ: bias and variance of the policy gradient.

Two tokenizations of the same strings: the sender's model emits a two-letter completion as ONE
token (so only μ(chunk) crosses the wire), the receiver reads it as two letters (n_c = 2). π_θ and
μ draw letters i.i.d. from {a, b}; A(y) is fixed. The exact policy gradient ∇_θ Σ_y π_θ(y) A(y) is
computed by enumeration and compared with the IS-weighted surrogate gradient that behaviour_view's
ratios give on completions sampled from μ (batches of samples: mean and standard error):

  chunk        every receiver token carries r_c (value) with its own gradient: unbiased
  geometric    r_c^(1/n_c) per token (chunk_spread): biased towards weight 1
  per-token    the same-tokenizer case, each letter its own μ_t: token-level IS without the
               ratios of the other tokens, biased whenever A depends on the whole completion
"""

from __future__ import annotations

import itertools

import torch

from losses.base import LossInputs, behaviour_view, safe_exp

P_MU = torch.tensor([0.8, 0.2])  # μ(a), μ(b)
THETA = torch.tensor([-0.4, 0.6])  # π_θ = softmax(θ): π(a) ≈ 0.27
ADV = {(0, 0): -0.2, (0, 1): 0.3, (1, 0): 0.3, (1, 1): 1.0}


def exact_gradient() -> torch.Tensor:
    theta = THETA.clone().requires_grad_(True)
    logpi = torch.log_softmax(theta, 0)
    j = sum(torch.exp(logpi[a] + logpi[b]) * adv for (a, b), adv in ADV.items())
    (grad,) = torch.autograd.grad(j, theta)
    return grad


def surrogate_gradient(y: torch.Tensor, kind: str) -> torch.Tensor:
    """∇_θ of mean_i Σ_t w_{i,t} A_i with the weights behaviour_view builds for `kind`."""
    theta = THETA.clone().requires_grad_(True)
    logpi = torch.log_softmax(theta, 0)
    logp = logpi[y]  # [N, 2] receiver tokens: one letter each
    log_mu = torch.log(P_MU)[y]  # [N, 2]
    n = len(y)
    adv = torch.tensor([ADV[(int(a), int(b))] for a, b in y])
    aligned = kind == "per-token"
    inputs = LossInputs(
        logp=logp, logp_old=logp.detach(), logp_beh=log_mu if aligned else torch.zeros(n, 2),
        logp_beh_seq=log_mu.sum(1), beh_aligned=torch.full((n,), aligned), mask=torch.ones(n, 2),
        advantages=adv, group_ids=torch.zeros(n, dtype=torch.long), is_external=torch.ones(n, dtype=torch.bool),
        beh_chunks=None if aligned else torch.zeros(n, 2, dtype=torch.long),  # both letters: chunk 0
        logp_beh_chunks=None if aligned else torch.stack([log_mu.sum(1), torch.zeros(n)], 1),
        chunk_spread=kind == "geometric")
    view = behaviour_view(inputs)
    surrogate = (safe_exp(view.log_ratio) * view.advantages[:, None] * view.m).sum() / n
    (grad,) = torch.autograd.grad(surrogate, theta)
    return grad


def estimates(kind: str, batches: int = 50, per_batch: int = 2000, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, standard error) of the surrogate gradient over batches of completions sampled from μ."""
    gen = torch.Generator().manual_seed(seed)
    grads = torch.stack([surrogate_gradient(torch.multinomial(P_MU, 2 * per_batch, True, generator=gen).view(-1, 2), kind)
                         for _ in range(batches)])
    return grads.mean(0), grads.std(0) / batches**0.5


def test_the_chunk_weight_gives_the_exact_policy_gradient_and_the_geometric_spread_does_not():
    exact = exact_gradient()
    chunk, chunk_se = estimates("chunk")
    geo, geo_se = estimates("geometric")
    # unbiased: within 4 standard errors of the exact gradient, in both coordinates
    assert ((chunk - exact).abs() < 4 * chunk_se + 1e-4).all(), (chunk, exact, chunk_se)
    # the geometric spread is biased: far outside its own error, and shrunk towards weight 1
    assert ((geo - exact).abs() > 10 * geo_se).any(), (geo, exact, geo_se)


def test_token_level_is_without_the_other_tokens_ratios_is_biased_here_too():
    """The same-tokenizer per-token ratio (token TIS) is the baseline the chunk weight replaces: on this
    case it is biased as well, because A depends on both letters; the chunk weight is not."""
    exact = exact_gradient()
    tok, tok_se = estimates("per-token")
    assert ((tok - exact).abs() > 10 * tok_se).any(), (tok, exact, tok_se)


def test_the_enumerated_gradient_is_right():
    # ∇_θ J by hand: Σ_y π(y) A(y) (e_{y1} + e_{y2} − 2π)
    pi = torch.softmax(THETA, 0)
    by_hand = torch.zeros(2)
    for a, b in itertools.product(range(2), repeat=2):
        onehots = torch.nn.functional.one_hot(torch.tensor([a, b]), 2).float().sum(0)
        by_hand += pi[a] * pi[b] * ADV[(a, b)] * (onehots - 2 * pi)
    assert torch.allclose(exact_gradient(), by_hand, atol=1e-6)
