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


def _sized(rewards, source, index, tokens, config=None, created_at=0.0) -> Group:
    g = _group(rewards, source, index, config)
    g.completions = [Completion("x", (1,) * tokens, (-0.1,) * tokens, "stop") for _ in rewards]
    g.created_at = created_at
    return g


def test_external_tokens_take_pooled_groups_until_the_budget_instead_of_j():
    # 6 informative pooled groups of 2 × 10 = 20 completion tokens; budget 50 → 3 taken (20, 40, 60 ≥ 50)
    local = [_group([1, 0], index=i) for i in range(4)]
    sel = SapoSelector(SelectConfig(local_groups=2, external_groups=1, external_tokens=50), seed=0)
    sel.add_external([_sized([1, 0], "peerA", i, 10) for i in range(6)] + [_sized([0, 0], "peerB", 9, 10)])
    s = sel.select(local)
    assert (s.local, s.external) == (2, 3)  # J = 1 ignored: the budget decides
    assert len(sel.pool) == 3  # the uninformative one was dropped before counting
    off = SapoSelector(SelectConfig(local_groups=2, external_groups=1), seed=0)
    off.add_external([_sized([1, 0], "peerA", i, 10) for i in range(6)])
    assert off.select(local).external == 1


def test_external_tokens_backfill_counts_against_j():
    local = [_group([1, 0], index=i) for i in range(8)]
    sel = SapoSelector(SelectConfig(local_groups=2, external_groups=4, external_tokens=1000), seed=0)
    sel.add_external([_sized([1, 0], "peerA", 0, 10)])  # the whole pool: 1 group, 20 tokens
    s = sel.select(local)
    assert (s.local, s.external) == (5, 1)  # 2 + (4 − 1) own groups


def test_prefer_useful_orders_unsolved_kinds_then_variance_then_freshness():
    easy, hard = {"band": "easy"}, {"band": "hard"}
    local = [_group([1, 0], index=0, config=easy), _group([0, 0], index=1, config=hard)]  # hard: solved nothing
    pool = [_sized([1, 0, 0, 0], "p", 10, 5, easy, created_at=3.0),   # solved kind, variance 0.1875
            _sized([1, 1, 0, 0], "p", 11, 5, easy, created_at=1.0),   # solved kind, variance 0.25, older
            _sized([1, 1, 0, 0], "p", 12, 5, easy, created_at=2.0),   # solved kind, variance 0.25, newer
            _sized([1, 0, 0, 0], "p", 13, 5, hard, created_at=0.0)]   # unsolved kind: first whatever else
    order = []
    for _ in range(4):
        sel = SapoSelector(SelectConfig(local_groups=0, external_groups=1, backfill=False, prefer="useful"), seed=0)
        sel.add_external(list(pool))
        sel.select(local)  # observes our own groups, then takes one
        sel.pool = [g for g in pool if g.task.ref.index not in order]
        s = sel.select([])
        order.append(s.groups[0].task.ref.index)
    assert order == [13, 12, 11, 10]


def test_prefer_useful_is_not_uniform():
    # ignoring the option (uniform) would pick the unsolved kind's single group in 1 of 10 pools only
    easy, hard = {"band": "easy"}, {"band": "hard"}
    hits = 0
    for seed in range(10):
        sel = SapoSelector(SelectConfig(local_groups=0, external_groups=1, backfill=False, prefer="useful"), seed=seed)
        sel.add_external([_sized([1, 0], "p", i, 5, easy) for i in range(9)] + [_sized([1, 0], "p", 99, 5, hard)])
        s = sel.select([_group([1, 0], index=0, config=easy), _group([0, 0], index=1, config=hard)])
        hits += s.groups[0].task.ref.index == 99
    assert hits == 10


def _own_round(round_, tokens=10, n=2, informative=True):
    out = []
    for i in range(n):
        g = _sized([1, 0] if informative else [1, 1], "self", 100 * round_ + i, tokens)
        g.round = round_
        out.append(g)
    return out


def test_replay_fills_the_step_with_earlier_own_groups_nearest_the_budget():
    # 2 own groups of 2 × 10 tokens a round; budget 75 → own 40 + replayed 20 (gap 35 > 10) + 20 (gap 15 > 10),
    # then stop (gap −5): never a group of this round, never one that carries no signal
    sel = SapoSelector(SelectConfig(local_groups=2, external_groups=0, replay_tokens=75), seed=0)
    first = sel.select(_own_round(0) + _own_round(0, informative=False)[:1])
    assert (first.local, first.replayed) == (2, 0)  # nothing earlier to replay in round 0
    assert len(sel.replay) == 2  # the uninformative group is not kept
    s = sel.select(_own_round(1))
    assert (s.local, s.replayed) == (2, 2) and {g.round for g in s.groups[2:]} == {0}
    assert sum(len(c.token_ids) for g in s.groups for c in g.completions) == 80
    s = sel.select(_own_round(2))  # fewest replays first: round 1's groups (0 replays) before round 0's (1 each)
    assert [g.round for g in s.groups[2:]] == [1, 1]
    sel.replay_to = 50  # a bench sets the next step's budget: 40 own, gap 10 is not more than half a group
    assert sel.select(_own_round(3)).replayed == 0


def test_replay_repeat_lets_few_groups_reach_a_large_budget():
    # round 1 has only round 0's 2 groups (20 tokens each) to replay; budget 140 → own 40 + 100 to fill.
    # Once each (the default): 40 + 40 = 80, far short. Up to 3 times each: 40 + 5 × 20 = 140, the least replayed
    # group first every time (so the two alternate), never past 3 of one.
    for repeat, want in ((1, [0, 0]), (3, [0, 0, 0, 0, 0])):
        sel = SapoSelector(SelectConfig(local_groups=2, external_groups=0, replay_tokens=140, replay_repeat=repeat),
                           seed=0)
        sel.select(_own_round(0))
        s = sel.select(_own_round(1))
        assert [g.round for g in s.groups[2:]] == want and s.replayed == len(want)
        replayed = s.groups[2:]
        assert max(sum(g is h for h in replayed) for g in replayed) == min(repeat, 3)
        assert [e[0] for e in sel.replay[:2]] == ([1, 1] if repeat == 1 else [3, 2])
    sel = SapoSelector(SelectConfig(local_groups=2, external_groups=0, replay_tokens=1000, replay_repeat=2), seed=0)
    sel.select(_own_round(0))
    assert sel.select(_own_round(1)).replayed == 4  # 2 groups × 2: the cap, however far the budget is


def test_replay_pool_is_bounded_oldest_out_and_off_by_default():
    sel = SapoSelector(SelectConfig(local_groups=2, external_groups=0, replay_tokens=1000, replay_pool=3), seed=0)
    for r in range(4):
        sel.select(_own_round(r))
    assert len(sel.replay) == 3 and min(e[1].round for e in sel.replay) == 2
    off = SapoSelector(SelectConfig(local_groups=2, external_groups=0), seed=0)
    for r in range(3):
        assert off.select(_own_round(r)).replayed == 0
    assert off.replay == []
