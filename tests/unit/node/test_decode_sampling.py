"""The decode loop samples the distribution it reports: first-token frequencies over 20,000 draws from tiny-qwen2
match softmax(logits / T), and under top_p the nucleus renormalised (transformers' TopPLogitsWarper rule);
chi-square goodness of fit, p > 0.001. Each test also shows the check has power: the same counts are
rejected against the distribution a wrong sampler would draw from."""

from __future__ import annotations

import pytest
import torch

from node.generation.decode import DecodeLoop
from node.generation.sampling import nucleus
from node.tasks.source import render_prompt

DRAWS = 20_000
BATCH = 2_000  # rows per decode call (the KV cache of 20,000 rows at once would be ~0.6 GB)


def chi_square_p(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """p-value of Pearson's chi-square test of `counts` against `probs`; bins expecting < 5 are pooled."""
    expected = probs.double() * counts.sum()
    small = expected < 5
    obs = torch.cat([counts[~small].double(), counts[small].double().sum().reshape(1)])
    exp = torch.cat([expected[~small], expected[small].sum().reshape(1)])
    keep = exp > 0
    if bool((obs[~keep] > 0).any()):
        return 0.0  # draws where the distribution puts no mass
    obs, exp = obs[keep], exp[keep]
    stat = ((obs - exp) ** 2 / exp).sum()
    df = obs.numel() - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), stat / 2))


def _first_tokens(lm, prompt_ids, temperature, top_p, seed=0) -> torch.Tensor:
    torch.manual_seed(seed)
    loop = DecodeLoop()
    counts = torch.zeros(lm.model.config.vocab_size, dtype=torch.long)
    for _ in range(DRAWS // BATCH):
        out = loop.run(lm.model, [prompt_ids] * BATCH, max_new_tokens=1, temperature=temperature, top_p=top_p,
                       eos_id=lm.tokenizer.eos_token_id, pad_id=lm.tokenizer.pad_token_id)
        counts += torch.bincount(out.tokens[:, 0], minlength=counts.numel())
    return counts


@pytest.fixture(scope="module")
def setup(tiny_qwen):
    prompt = render_prompt(tiny_qwen.tokenizer, "Spell this word backward: banana", None)
    ids = tiny_qwen.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = tiny_qwen.model(input_ids=torch.tensor([ids])).logits[0, -1].float()
    return tiny_qwen, ids, logits


@pytest.mark.parametrize("temperature", [1.0, 0.25])
def test_first_tokens_follow_softmax_of_logits_over_t(setup, temperature):
    lm, ids, logits = setup
    counts = _first_tokens(lm, ids, temperature, 1.0)
    assert counts.sum() == DRAWS
    assert chi_square_p(counts, (logits / temperature).softmax(-1)) > 0.001
    wrong = 1.0 if temperature != 1.0 else 0.25  # power: the other temperature's distribution is rejected
    assert chi_square_p(counts, (logits / wrong).softmax(-1)) < 1e-6


def test_first_tokens_under_top_p_follow_the_renormalised_nucleus(setup):
    lm, ids, logits = setup
    temperature, top_p = 0.25, 0.7
    z = logits / temperature
    kept = torch.isfinite(nucleus(z, top_p))
    full = z.softmax(-1)
    assert 10 < int(kept.sum()) < 0.6 * kept.numel() and full[kept].sum() >= top_p  # a real cut; the rule's mass
    counts = _first_tokens(lm, ids, temperature, top_p, seed=1)
    assert int(counts[~kept].sum()) == 0  # nothing outside the nucleus is ever drawn
    target = torch.where(kept, full, torch.zeros_like(full))
    assert chi_square_p(counts, target / target.sum()) > 0.001
    # power: unrenormalised-but-truncated is not a distribution; the full softmax is rejected
    assert chi_square_p(counts, full) < 1e-6


def test_nucleus_matches_transformers_top_p_warper():
    from transformers.generation.logits_process import TopPLogitsWarper

    torch.manual_seed(0)
    z = torch.randn(16, 300) * 3
    for top_p in (0.1, 0.5, 0.9, 0.99):
        ref = TopPLogitsWarper(top_p)(None, z.clone())
        torch.testing.assert_close(torch.isfinite(nucleus(z, top_p)), torch.isfinite(ref), rtol=0, atol=0)
