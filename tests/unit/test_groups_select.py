"""Group advantages and SAPO selection, with hand-computed numbers."""


import pytest

from node.round.config import SelectConfig
from node.round.groups import Group, advantages
from node.round.select import SapoSelector
from node.tasks.source import Task
from protocols.records import Completion, TaskRef


def test_std_advantages_by_hand():
    # rewards [1, 0, 0, 1]: mean 0.5, population std 0.5 → ±0.5 / (0.5 + 1e-6)
    a = advantages([1.0, 0.0, 0.0, 1.0])
    assert a == pytest.approx([0.5 / 0.500001, -0.5 / 0.500001, -0.5 / 0.500001, 0.5 / 0.500001])


def test_mean_only_advantages_by_hand():
    # rewards [1, 0, 0, 0]: mean 0.25 → [0.75, -0.25, -0.25, -0.25]
    assert advantages([1.0, 0, 0, 0], "mean") == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_zero_std_group_has_zero_advantage():
    assert advantages([1.0, 1.0, 1.0]) == [0.0, 0.0, 0.0]


def _group(rewards, source="self", index=0, config=None) -> Group:
    task = Task(TaskRef("chain_sum", config or {}, 0, index), "q", "a", {})
    comps = [Completion("x", (1,), (-0.1,), "stop") for _ in rewards]
    return Group(task, comps, list(rewards), advantages(list(rewards)), source=source)


def test_sapo_selects_i_local_and_j_external_informative_groups():
    sel = SapoSelector(SelectConfig(local_groups=2, external_groups=3), seed=0)
    sel.add_external([_group([1, 0], "peerA", i) for i in range(4)] + [_group([0, 0], "peerB", 9)])
    local = [_group([1, 0], index=i) for i in range(3)] + [_group([1, 1], index=7)]
    s = sel.select(local)
    assert (s.local, s.external) == (2, 3)
    assert s.dropped_zero_adv == 2  # one local [1,1], one external [0,0]
    assert all(g.informative for g in s.groups)
    assert len(sel.pool) == 1  # 4 informative external, 3 used, used ones leave the pool


def test_pool_is_bounded_and_prunable():
    sel = SapoSelector(SelectConfig(pool_size=3), seed=0)
    sel.add_external([_group([1, 0], "p", i) for i in range(5)])
    assert [g.task.ref.index for g in sel.pool] == [2, 3, 4]  # oldest first out
    assert sel.prune(lambda g: g.task.ref.index != 3) == 1


def test_backfill_keeps_the_batch_at_i_plus_j_when_peers_deliver_too_few():
    local = [_group([1, 0], index=i) for i in range(6)]
    sel = SapoSelector(SelectConfig(local_groups=2, external_groups=3), seed=0)
    sel.add_external([_group([1, 0], "peerA", 10)])  # one usable peer group of the 3 wanted
    s = sel.select(local)
    assert (s.local, s.external) == (4, 1)  # 2 + (3 − 1) own groups fill the gap: 5 = I + J in all
    off = SapoSelector(SelectConfig(local_groups=2, external_groups=3, backfill=False), seed=0)
    off.add_external([_group([1, 0], "peerA", 10)])
    assert (lambda s: (s.local, s.external))(off.select(local)) == (2, 1)
    assert SapoSelector(SelectConfig(local_groups=2, external_groups=3), seed=0).usable() == 0


def test_pool_backfill_fills_the_step_with_peers_groups_when_own_groups_carry_no_signal():
    local = [_group([1, 0], index=0), _group([0, 0], index=1), _group([0, 0], index=2)]  # 1 informative of 3
    peers = [_group([1, 0], "peerA", 10 + i) for i in range(8)]
    plain = SapoSelector(SelectConfig(local_groups=3, external_groups=2), seed=0)
    plain.add_external(peers)
    assert (lambda s: (s.local, s.external))(plain.select(local)) == (1, 2)  # 3 wanted in all, 2 missing
    fill = SapoSelector(SelectConfig(local_groups=3, external_groups=2, pool_backfill=True), seed=0)
    fill.add_external(peers)
    assert (lambda s: (s.local, s.external))(fill.select(local)) == (1, 4)  # I + J = 5
    solo = SapoSelector(SelectConfig(local_groups=3, external_groups=0, pool_backfill=True), seed=0)
    solo.add_external(peers)
    assert (lambda s: (s.local, s.external))(solo.select(local)) == (1, 0)  # J = 0 stays solo


def test_prefer_need_takes_peers_groups_on_the_kinds_we_fail_first():
    easy, hard = {"band": "easy"}, {"band": "hard"}
    sel = SapoSelector(SelectConfig(local_groups=4, external_groups=2, prefer="need"), seed=0)
    # our own groups: the easy kind mostly right (mean 0.75), the hard kind all wrong (0)
    local = [_group([1, 1, 1, 0], index=i, config=easy) for i in range(3)] + [_group([0, 0, 0, 0], index=9, config=hard)]
    pool = [_group([1, 0], "peerA", 20 + i, config=easy) for i in range(5)] + [_group([1, 0], "peerB", 40, config=hard)]
    sel.add_external(pool)
    s = sel.select(local)
    taken = [g.task.ref.config for g in s.groups if g.is_external]
    assert taken.count(hard) == 1 and len(taken) == 2  # the one hard group, then an easy one
    assert sel.own_reward == {"chain_sum[band=easy]": pytest.approx(0.75), "chain_sum[band=hard]": 0.0}
    # a kind we have never drawn counts as most needed
    other = SapoSelector(SelectConfig(local_groups=1, external_groups=1, prefer="need"), seed=1)
    other.add_external([_group([1, 0], "p", 1, config=easy), _group([1, 0], "p", 2, config={"band": "new"})])
    assert [g.task.ref.config for g in other.select([_group([1, 1, 0, 1], config=easy)]).groups if g.is_external] \
        == [{"band": "new"}]
