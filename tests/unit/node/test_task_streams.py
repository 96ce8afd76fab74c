"""Task streams on the real reasoning-gym generators: independent across seeds, and disjoint where
a claim needs it — every held-out set against every training stream, the federated public set
against every private set (node.tasks.streams)."""

from __future__ import annotations

import pytest

from node.federated.config import SplitConfig
from node.federated.mode import FederatedTasks
from node.tasks.config import DatasetSpec, TaskConfig
from node.tasks.gym import build_dataset
from node.tasks.source import TaskError, TaskSource
from node.tasks.streams import (
    SPARE_BASE,
    eval_seed,
    private_seed,
    public_seed,
    train_seed,
)
from protocols.records import TaskRef

# two 1-digit terms: a question space of ≈ 200, so chance collisions are frequent and any leak shows
SMALL = DatasetSpec(name="chain_sum", config={"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1})
CFG = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}


def _questions(src: TaskSource, rounds: int = 40, n: int = 8) -> list[str]:
    return [t.question for r in range(rounds) for t in src.sample(r, n)]


def test_the_generator_hazard_streams_avoid():
    """reasoning-gym seeds item i by Random(seed + i): item (seed s, index i) is item (0, s + i)."""
    for s in (1, 5, 1000):
        a = build_dataset("chain_sum", CFG, s)[3]["question"]
        assert a == build_dataset("chain_sum", CFG, 0)[s + 3]["question"]


def test_training_streams_of_different_seeds_are_not_shifted_copies():
    streams = {k: _questions(TaskSource(TaskConfig(datasets=[SMALL], seed=k, eval_size=0, system_prompt=None)))
               for k in range(4)}
    n = len(streams[0])
    for k in (1, 2, 3):
        # the old layout: node k's item p was node 0's item p + k (all but the last k equal)
        shifted = sum(streams[k][p] == streams[0][p + k] for p in range(n - k)) / (n - k)
        same = sum(a == b for a, b in zip(streams[k], streams[0])) / n
        assert shifted < 0.05 and same < 0.05, (k, shifted, same)  # chance level for ≈ 200 questions: ≈ 0.005
    refs = [{(t.ref.seed, t.ref.index) for r in range(40) for t in TaskSource(
        TaskConfig(datasets=[SMALL], seed=k, eval_size=0, system_prompt=None)).sample(r, 8)} for k in range(4)]
    assert all(not refs[i] & refs[j] for i in range(4) for j in range(i + 1, 4))


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_no_training_item_asks_a_held_out_question(seed):
    src = TaskSource(TaskConfig(datasets=[SMALL], seed=seed, eval_size=64, system_prompt=None))
    held_out = {t.question for t in src.eval_set()}
    assert len(held_out) > 40  # ≈ a quarter of the question space
    train = [t for r in range(60) for t in src.sample(r, 8)]
    assert not held_out & {t.question for t in train}
    assert any(t.ref.index >= SPARE_BASE for t in train)  # replaced draws come from the spare range
    assert all(t.ref.seed == train_seed(seed) for t in train)
    assert all(t.ref.seed == eval_seed(src.cfg.eval_seed) for t in src.eval_set())
    # a peer's task that asks one of our held-out questions is dropped, not trained on
    ref = next(t.ref for t in src.eval_set())
    with pytest.raises(TaskError) as exc:
        src.check_external(ref)
    assert exc.value.reason == "held_out"
    assert src.check_external(train[0].ref).question == train[0].question


def test_federated_public_prompts_are_never_private_items_of_any_client():
    families = [SMALL, DatasetSpec(name="chain_sum", config={**CFG, "min_terms": 3, "max_terms": 3})]
    clients = [FederatedTasks(TaskConfig(datasets=families, seed=i, system_prompt=None, eval_size=32),
                              SplitConfig(clients=4, client=i, private_size=128, public_size=64)) for i in range(4)]
    public = {t.question for t in clients[0].public_set}
    held_out = {t.question for t in clients[0].eval_set()}
    assert {t.question for t in clients[3].public_set} == public and not public & held_out
    for c in clients:
        private = {t.question for t in c.private}
        assert not private & public and not private & held_out
        assert all(t.ref.seed == private_seed(0) for t in c.private)
    assert all(t.ref.seed == public_seed(0) for t in clients[0].public_set)
    refs = [{(t.ref.seed, t.ref.index) for t in c.private} for c in clients]
    assert all(not refs[i] & refs[j] for i in range(4) for j in range(i + 1, 4))


def test_stream_seeds_fit_msgpack_and_never_overlap():
    seeds = [train_seed(0), train_seed(2**29 - 1), eval_seed(0), eval_seed(2**29 - 1), private_seed(0),
             public_seed(2**28 - 1)]
    assert seeds == sorted(seeds) and max(seeds) + 2**32 <= 2**63
    assert all(b - a >= 2**32 for a, b in zip(seeds, seeds[1:]))
    with pytest.raises(ValueError):
        train_seed(2**29)
    assert TaskRef("chain_sum", CFG, public_seed(2**28 - 1), 2**32 - 1)  # the largest ref is a plain int
