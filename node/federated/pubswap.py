"""PubSwap response aggregation on public steps (PubSwap paper §3.4), as pure rules.

On a public step every client generates K responses to the same public prompt x and publishes
them; each client then builds the K-response group it trains on from the pool of all N·K:

  Balanced  with c_n = own correct responses: if c_n ≥ K/2 keep the own group unchanged; else
            replace up to m = ⌊K/2 − c_n⌋ own *incorrect* responses with *correct* responses from
            other peers' pools (never own), so the group ends as close to half correct as the pool
            allows (maximal reward variance). Fewer correct donors than m ⇒ replace only as many.
  Random    K responses drawn uniformly without replacement from the pooled N·K. The pool is put in
            a canonical order (peer id, then position) and the draw is seeded by (swarm seed, round,
            prompt), so every node that received the same pool trains on the same K responses.

"Correct" is a reward ≥ 1.0 from *this* node's verifier (peers' claims are never used). Responses
whose source is this node's own peer id are never donors: that covers our own group in the pool
and copies of our own bundle echoed back by a peer.

Deviation from the paper: the server of the paper is gone; each node applies the rule to the
pool it gathered within the round's timeout, so a peer whose responses did not arrive is simply
absent from the pool (and, for Random, nodes with different pools draw different sets).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Response:
    """One response in a public prompt's pool."""

    completion: Any  # protocols.records.Completion (opaque here)
    reward: float  # from this node's verifier
    source: str  # peer id of the generator ("self" peer id for our own)
    position: int  # index within the source's group (canonical order for Random)

    @property
    def correct(self) -> bool:
        return self.reward >= 1.0


@dataclass(frozen=True)
class Built:
    """The group a node trains on for one public prompt."""

    responses: list[Response]  # [K]
    replaced: int  # own responses swapped for peers' (Balanced) / peers' responses drawn (Random)
    own_correct: int  # c_n


def is_public_round(round_: int, tau_swap: int) -> bool:
    """The last round of every PubSwap period of τ_swap rounds is the public step."""
    return (round_ + 1) % tau_swap == 0


def balanced(own: list[Response], pool: list[Response], own_id: str, rng: random.Random) -> Built:
    """Balanced rule: swap up to ⌊K/2 − c_n⌋ own incorrect responses for peers' correct ones."""
    k = len(own)
    c = sum(r.correct for r in own)
    if 2 * c >= k:
        return Built(list(own), 0, c)
    donors = [r for r in pool if r.correct and r.source != own_id]
    wrong = [i for i, r in enumerate(own) if not r.correct]
    m = min(k // 2 - c, len(donors), len(wrong))  # ⌊K/2 − c⌋ = ⌊K/2⌋ − c for integer c
    out = list(own)
    for slot, donor in zip(rng.sample(wrong, m), rng.sample(donors, m)):
        out[slot] = donor
    return Built(out, m, c)


def random_draw(pool: list[Response], k: int, own_id: str, seed_key: str) -> Built:
    """Random rule: K of the pooled responses, the same K on every node holding the same pool."""
    ordered = sorted(pool, key=lambda r: (r.source, r.position))
    rng = random.Random(int.from_bytes(hashlib.sha256(seed_key.encode()).digest()[:8], "big"))
    picked = rng.sample(ordered, min(k, len(ordered)))
    own_correct = sum(r.correct for r in pool if r.source == own_id)
    return Built(picked, sum(r.source != own_id for r in picked), own_correct)
