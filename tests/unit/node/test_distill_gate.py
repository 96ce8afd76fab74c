"""The headroom gate (node/distill/gate.py, `distill.headroom_margin`): a student asks a named teacher only while
the teacher's own answers, re-verified by the student on its own tasks, score at least the margin above the
student's own. Hand-computed scores on real groups, then real nodes (tiny-qwen2) on the in-memory twin."""

from __future__ import annotations

import pytest

from node.config import ConfigError, load_config, parse_config
from node.distill.gate import HeadroomGate, own_task_keys
from node.node import Node
from node.round.groups import Group
from node.round.loop import run_round
from node.tasks.source import regenerate
from protocols.records import TaskRef
from swarm.exchange.twin import InMemoryHub, InMemoryTransport

SPEC = {"min_terms": 2, "max_terms": 2, "max_digits": 1}


def _group(rewards, source="self", dataset="chain_sum", config=SPEC) -> Group:
    task = regenerate(TaskRef(dataset, dict(config), 0, 0))
    return Group(task, [], list(rewards), [0.0] * len(rewards), source=source)


def test_the_gate_opens_only_at_the_margin_on_our_tasks_from_named_teachers():
    keys = {("chain_sum", repr(sorted(SPEC.items())))}
    gate = HeadroomGate(0.4, 2, ["t1", "t2"], keys)
    assert gate.state("t1") == "measuring" and not gate.may_ask("t1")
    # ours: 0.25 and 0.25 → 0.25; t1: 0.75 and 0.5 → 0.625 (+0.375, below 0.4); t2: 1.0 and 0.75 → 0.875 (+0.625)
    gate.observe([_group([0, 0, 1, 0]), _group([1, 0, 0, 0])])
    gate.observe([_group([1, 1, 0, 1], "t1"), _group([1, 0, 1, 0], "t1"),
                  _group([1, 1, 1, 1], "t2"), _group([1, 1, 0, 1], "t2")])
    # what does not count: a peer not named, and a named teacher's group on a task of another config
    gate.observe([_group([1, 1, 1, 1], "impostor"), _group([0, 0, 0, 0], "t2", config={**SPEC, "max_digits": 2})])
    assert gate.state("t1") == "closed" and not gate.may_ask("t1")
    assert gate.state("t2") == "open" and gate.may_ask("t2")
    report = gate.report()
    assert report["student"] == 0.25 and report["teachers"]["t1"] == {"state": "closed", "groups": 2, "score": 0.625}
    assert report["teachers"]["t2"]["score"] == 0.875 and "impostor" not in report["teachers"]
    # the student catches up: the gate closes for t2 too (the latest 2 groups only: 0.75 and 1.0 → 0.875)
    gate.observe([_group([1, 0, 1, 1]), _group([1, 1, 1, 1])])
    assert gate.state("t2") == "closed"
    assert HeadroomGate(None, 2, ["t1"], keys).may_ask("t1")  # no margin: no gate


def test_own_task_keys_match_the_groups_of_the_nodes_own_datasets():
    cfg = load_config("examples/lab-solo.yaml")
    gate = HeadroomGate(0.0, 1, ["t"], own_task_keys(cfg.tasks))
    gate.observe([_group([1.0], "t", "spell_backward", {"min_word_len": 3, "max_word_len": 6}),
                  _group([0.0], dataset="spell_backward", config={"min_word_len": 3, "max_word_len": 6})])
    assert gate.state("t") == "open"


def _config(name: str, seed: int, **distill) -> dict:
    return {
        "name": name, "seed": seed, "torch_threads": 1, "model": {"spec": "tiny-qwen2"},
        "tasks": {"datasets": [{"name": "chain_sum", "config": SPEC}], "system_prompt": None, "eval_size": 0,
                  "seed": seed},
        "generation": {"prompts_per_round": 1, "group_size": 4, "max_new_tokens": 8},
        "select": {"local_groups": 1, "external_groups": 1, "drop_zero_advantage": False},
        "swarm": {"enabled": True, "wait_s": 0.2}, "eval": {"every": 0}, "checkpoint": {"every": 100},
        "metrics": {"console": False}, "distill": distill,
    }


def test_a_teacher_below_the_margin_is_not_asked_and_one_above_is(tmp_path):
    """Two students of one teacher, measuring it the same way (window 2): one whose margin no teacher can meet
    (+1: the teacher would have to be always right where the student never is) never asks; one whose margin any
    teacher meets (−1) asks once both sides have 2 groups measured, and not before."""
    hub = InMemoryHub()

    def node(name: str, seed: int, **distill) -> Node:
        return Node(parse_config(_config(name, seed, **distill)), tmp_path / name,
                    transport=InMemoryTransport(hub, name, "rlswarm", poll_interval_s=0.01))

    teacher = node("n1", 1, serve=True, serve_tokens_per_s=1e9)
    high = node("n0", 0, teachers=["n1"], headroom_margin=1.0, headroom_groups=2)
    low = node("n2", 2, teachers=["n1"], headroom_margin=-1.0, headroom_groups=2)
    try:
        rows_high, rows_low = [], []
        for r in range(5):
            run_round(teacher, r)
            rows_high.append(run_round(high, r).line())
            rows_low.append(run_round(low, r).line())
        for m in rows_high:
            assert m["distill_teacher"] is None and m["distill_requests"] == 0
            assert m["distill_drops"] == {"no_headroom": 1}
        gate = rows_high[-1]["distill_gate"]["teachers"]["n1"]
        assert gate["state"] == "closed" and gate["groups"] == 2 and gate["score"] is not None
        states = [m["distill_gate"]["teachers"]["n1"]["state"] for m in rows_low]
        asked = [m["distill_teacher"] for m in rows_low]
        # the state is reported after the round's gathering: a round asks by the state the previous round ended in
        first_open = states.index("open")
        assert states[:first_open] == ["measuring"] * first_open and set(states[first_open:]) == {"open"}
        assert asked[:first_open + 1] == [None] * (first_open + 1) and asked[first_open + 1:] == \
            ["n1"] * (len(asked) - first_open - 1) and first_open + 1 < len(asked), (states, asked)
        assert all(m["distill_answers"] == m["distill_requests"] == 1 for m in rows_low[first_open + 1:])
    finally:
        for n in (teacher, high, low):
            n.close()


@pytest.mark.parametrize("over", [{"distill.headroom_margin": 2.0}, {"distill.headroom_groups": 0}])
def test_a_gate_out_of_bounds_is_one_clear_config_error(over):
    with pytest.raises(ConfigError) as exc:
        load_config("examples/teacher/opd-student.yaml", over)
    assert "\n" not in str(exc.value) and "headroom" in str(exc.value)

