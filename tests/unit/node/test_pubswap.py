"""PubSwap Balanced / Random rules on hand-made pools, and the Dirichlet task split."""

from __future__ import annotations

import random

import pytest

from node.federated.pubswap import Response, balanced, is_public_round, random_draw
from node.federated.split import (
    dirichlet_counts,
    format_split,
    private_items,
    public_items,
)

ME = "peer-me"


def group(source: str, rewards: list[float]) -> list[Response]:
    return [Response(f"{source}:{i}", r, source, i) for i, r in enumerate(rewards)]


def test_public_round_is_the_last_of_each_swap_period():
    # τ_swap = 2: rounds 1, 3, 5 are public; τ_swap = 4: rounds 3, 7
    assert [r for r in range(8) if is_public_round(r, 2)] == [1, 3, 5, 7]
    assert [r for r in range(8) if is_public_round(r, 4)] == [3, 7]
    assert [r for r in range(3) if is_public_round(r, 1)] == [0, 1, 2]


def test_balanced_with_no_own_correct_replaces_half():
    # K = 8, c_n = 0 ⇒ m = ⌊8/2 − 0⌋ = 4 of our 8 incorrect become peers' correct ones
    own = group(ME, [0.0] * 8)
    pool = own + group("a", [1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]) + group("b", [1.0, 1.0, 1.0, 0.0, 0, 0, 0, 0])
    built = balanced(own, pool, ME, random.Random(0))
    assert built.replaced == 4 and built.own_correct == 0
    assert len(built.responses) == 8
    assert sum(r.correct for r in built.responses) == 4  # half correct: maximal reward variance
    donors = [r for r in built.responses if r.source != ME]
    assert len(donors) == 4 and all(r.correct for r in donors)
    assert len({r.completion for r in donors}) == 4  # four distinct donors, none reused
    kept = [r for r in built.responses if r.source == ME]
    assert len(kept) == 4 and not any(r.correct for r in kept)


def test_balanced_keeps_own_group_when_half_or_more_correct():
    own = group(ME, [1.0, 1.0, 0.0, 0.0])  # c_n = 2 ≥ K/2 = 2
    pool = own + group("a", [1.0] * 4)
    built = balanced(own, pool, ME, random.Random(0))
    assert built.responses == own and built.replaced == 0 and built.own_correct == 2
    own = group(ME, [1.0, 1.0, 1.0, 0.0])  # c_n = 3 > 2
    assert balanced(own, own + group("a", [1.0] * 4), ME, random.Random(0)).responses == own


def test_balanced_replaces_only_k_half_minus_c_and_only_incorrect():
    # K = 8, c_n = 1 ⇒ m = 4 − 1 = 3; our correct one is never replaced
    own = group(ME, [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    built = balanced(own, own + group("a", [1.0] * 8), ME, random.Random(1))
    assert built.replaced == 3 and built.own_correct == 1
    assert built.responses[0] == own[0]
    assert sum(r.source == "a" for r in built.responses) == 3
    assert sum(r.correct for r in built.responses) == 4


def test_balanced_odd_k_rounds_down():
    # K = 5, c_n = 1 ⇒ m = ⌊2.5 − 1⌋ = 1; c_n = 2 < 2.5 ⇒ m = ⌊0.5⌋ = 0
    own = group(ME, [1.0, 0.0, 0.0, 0.0, 0.0])
    assert balanced(own, own + group("a", [1.0] * 5), ME, random.Random(0)).replaced == 1
    own = group(ME, [1.0, 1.0, 0.0, 0.0, 0.0])
    assert balanced(own, own + group("a", [1.0] * 5), ME, random.Random(0)).replaced == 0


def test_balanced_with_too_few_correct_in_pool_replaces_what_there_is():
    # m would be 4, but the other peers hold only one correct response between them
    own = group(ME, [0.0] * 8)
    pool = own + group("a", [0.0] * 8) + group("b", [0.0] * 7 + [1.0])
    built = balanced(own, pool, ME, random.Random(0))
    assert built.replaced == 1
    assert [r.source for r in built.responses].count("b") == 1
    assert sum(r.correct for r in built.responses) == 1
    nobody = balanced(own, own + group("a", [0.0] * 8), ME, random.Random(0))
    assert nobody.replaced == 0 and nobody.responses == own


def test_balanced_never_takes_own_responses_even_echoed_back():
    # our own group in the pool twice (ours + a replay under our peer id), all correct there;
    # the only foreign correct response is a single one from "a"
    own = group(ME, [0.0, 0.0, 0.0, 0.0])
    echoed = [Response(f"echo:{i}", 1.0, ME, i) for i in range(4)]
    pool = own + echoed + group("a", [1.0, 0.0, 0.0, 0.0])
    built = balanced(own, pool, ME, random.Random(0))
    assert built.replaced == 1
    assert [r.completion for r in built.responses if r.source != ME] == ["a:0"]
    assert not any(str(r.completion).startswith("echo") for r in built.responses)


def test_random_draw_is_the_same_on_every_node_and_draws_from_the_whole_pool():
    pools = {p: group(p, [float(i % 2) for i in range(4)]) for p in ("p0", "p1", "p2")}
    pooled = [r for g in pools.values() for r in g]
    shuffled = list(reversed(pooled))  # another node received the bundles in another order
    a = random_draw(pooled, 4, "p0", "seed/7/chain_sum/12")
    b = random_draw(shuffled, 4, "p1", "seed/7/chain_sum/12")
    assert [r.completion for r in a.responses] == [r.completion for r in b.responses]
    assert len(a.responses) == 4 and len(set(r.completion for r in a.responses)) == 4
    assert a.replaced == sum(r.source != "p0" for r in a.responses)
    assert b.replaced == sum(r.source != "p1" for r in b.responses)
    # over many prompts every peer's responses get drawn: the draw covers the whole N·K pool
    seen = {r.source for key in range(30) for r in random_draw(pooled, 4, "p0", f"k{key}").responses}
    assert seen == {"p0", "p1", "p2"}
    assert random_draw(pooled[:3], 4, "p0", "x").responses.__len__() == 3  # pool smaller than K


def test_dirichlet_split_rows_sum_and_alpha_controls_heterogeneity():
    counts = dirichlet_counts(6, 4, 0.3, 200, seed=0)
    assert len(counts) == 4 and all(len(r) == 6 and sum(r) == 200 for r in counts)
    assert counts == dirichlet_counts(6, 4, 0.3, 200, seed=0)  # every node computes the same table

    def top_share(alpha: float) -> float:  # mean share of a client's biggest family over 20 seeds
        rows = [r for s in range(20) for r in dirichlet_counts(6, 4, alpha, 200, seed=s)]
        return sum(max(r) / 200 for r in rows) / len(rows)

    assert top_share(0.1) > top_share(0.3) > top_share(100.0)
    assert top_share(100.0) < 0.3  # near uniform: 1/6 ≈ 0.17 plus sampling noise
    with pytest.raises(ValueError):
        dirichlet_counts(3, 2, 0.0, 10, seed=0)


def test_private_sets_are_disjoint_and_public_set_is_shared():
    counts = dirichlet_counts(3, 4, 0.3, 50, seed=1)
    sets = [set(private_items(counts[n], n, 50)) for n in range(4)]
    assert all(len(s) == 50 for s in sets)
    assert all(not (sets[i] & sets[j]) for i in range(4) for j in range(i + 1, 4))
    assert public_items(3, 7) == [(0, 0), (1, 1), (2, 2), (0, 3), (1, 4), (2, 5), (0, 6)]
    text = format_split(["a", "b", "c"], counts, 0.3, 7)
    assert "α=0.3" in text and len(text.splitlines()) == 2 + 4
