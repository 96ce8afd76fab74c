"""Heterogeneous client data for federated mode: a Dirichlet(α) split of task families.

Following the equal-sized split of Acar et al. (2021) that the PubSwap paper uses (§4.3): each
client n draws family proportions p_n ~ Dir(α·1_F) and its private set of S items holds
multinomial(S, p_n) items of each family. Small α ⇒ each client sees few families (α = 0.3 is the
paper's default, 0.1 its "high heterogeneity" split). reasoning-gym families are procedural, so
no family runs out and every client gets exactly S items.

The split is a pure function of (families, clients, α, S, seed): every node computes the whole
table from the shared seed and takes its own row, so no coordinator is needed and the table a
node prints is the one every node uses.

Items: client n's j-th item of family f is position n·S + j of the family's private stream
(disjoint across clients); the public set is positions 0..P−1 of the public stream, families in
turn (representative, shared by every client). The two streams never share an item and private
items never ask a public or held-out question (node.tasks.streams, node.federated.mode).
"""

from __future__ import annotations

import numpy as np


def dirichlet_counts(families: int, clients: int, alpha: float, per_client: int, seed: int) -> list[list[int]]:
    """[clients][families] item counts; each row sums to `per_client`."""
    if families < 1 or clients < 1 or alpha <= 0 or per_client < 0:
        raise ValueError("need families ≥ 1, clients ≥ 1, alpha > 0, per_client ≥ 0")
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(clients):
        p = rng.dirichlet([alpha] * families) if families > 1 else np.ones(1)
        rows.append([int(c) for c in rng.multinomial(per_client, p)])
    return rows


def private_items(counts: list[int], client: int, per_client: int) -> list[tuple[int, int]]:
    """(family, index) of one client's private items, in a fixed order."""
    out = []
    for f, c in enumerate(counts):
        out += [(f, client * per_client + j) for j in range(c)]
    return out


def public_items(families: int, size: int) -> list[tuple[int, int]]:
    """(family, index) of the shared public set: families in turn."""
    return [(i % families, i) for i in range(size)]


def format_split(names: list[str], counts: list[list[int]], alpha: float, public: int) -> str:
    """The split as a text table: one row per client, one column per family."""
    width = max(8, *(len(n) for n in names))
    head = "client  " + "  ".join(n.rjust(width) for n in names)
    lines = [f"Dirichlet(α={alpha}) split of {len(names)} task families over {len(counts)} clients"
             f" ({sum(counts[0])} private items each, {public} public items shared)", head]
    for i, row in enumerate(counts):
        lines.append(f"{i:>6}  " + "  ".join(str(c).rjust(width) for c in row))
    return "\n".join(lines)
