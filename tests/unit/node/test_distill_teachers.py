"""A student's teachers are the peer ids its config names, and nothing a peer sends adds one (node/distill/student.py,
node/distill/config.py; `swarm local`'s `node:<name>`, ops/cli/local.py). Real nodes (tiny-qwen2) on the in-memory
twin: a peer whose records claim to be the teacher — by model name — is never asked; a named teacher of another
tokenizer is asked again by bytes within the round (round 0 scored)."""

from __future__ import annotations

import pytest

from node.config import ConfigError, load_config, parse_config
from node.node import Node
from node.round.loop import run_round
from swarm.exchange.twin import InMemoryHub, InMemoryTransport
from swarm.exchange.score_stream import MemoryScoreLink


def _config(name: str, seed: int, **distill) -> dict:
    return {
        "name": name, "seed": seed, "torch_threads": 1, "model": {"spec": "tiny-qwen2"},
        "tasks": {"datasets": [{"name": "chain_sum", "config": {"min_terms": 2, "max_terms": 2, "max_digits": 1}}],
                  "system_prompt": None, "eval_size": 0, "seed": seed},
        "generation": {"prompts_per_round": 1, "group_size": 4, "max_new_tokens": 8},
        "select": {"local_groups": 1, "external_groups": 2, "drop_zero_advantage": False},
        "swarm": {"enabled": True, "wait_s": 0.2}, "eval": {"every": 0}, "checkpoint": {"every": 100},
        "metrics": {"console": False}, "distill": distill,
    }


def test_a_peer_whose_records_claim_the_teachers_name_is_never_asked(tmp_path):
    """The attack of the review: records whose model name is the name (or id) a student gave its teacher. The
    student asks n1, the peer id its config names, every round; the impostor n2, whose records it receives and
    trains on, is never asked, however many rounds pass."""
    hub = InMemoryHub()

    def node(name: str, seed: int, **distill) -> Node:
        return Node(parse_config(_config(name, seed, **distill)), tmp_path / name,
                    transport=InMemoryTransport(hub, name, "rlswarm", poll_interval_s=0.01))

    teacher, impostor = node("n1", 1, serve=True, serve_tokens_per_s=1e9), node("n2", 2)
    student = node("n0", 0, teachers=["n1"])
    impostor.cfg.model.spec = "n1"  # its records now say `model.name: n1`
    asked_impostor: list[str] = []
    spy = MemoryScoreLink(impostor.transport, max_bytes=1 << 20)
    spy.serve(lambda requester, _data: (asked_impostor.append(requester), ("over_budget", b""))[1])
    try:
        rows = []
        for r in range(4):
            run_round(impostor, r)
            run_round(teacher, r)
            rows.append(run_round(student, r).line())
        assert any("n2" in m["external_peers"] for m in rows), rows  # the impostor's records did arrive
        assert [m["distill_teacher"] for m in rows] == ["n1"] * 4
        assert asked_impostor == []
        assert all(m["distill_answers"] == m["distill_requests"] > 0 for m in rows), rows
    finally:
        spy.close()
        for n in (student, teacher, impostor):
            n.close()


@pytest.mark.parametrize("entry", ["exported/teacher", "lab-spell", "HuggingFaceTB/SmolLM2-135M", "", "a b"])
def test_a_teacher_that_is_no_peer_id_is_one_clear_config_error(entry):
    with pytest.raises(ConfigError) as exc:
        load_config("examples/teacher/opd-student.yaml", {"distill.teachers": [entry]})
    msg = str(exc.value)
    assert "\n" not in msg and "distill.teachers" in msg and "peer id" in msg


def test_node_entries_are_resolved_by_swarm_local_and_refused_by_a_lone_node(tmp_path):
    from node.distill.mode import build_distill

    cfg = load_config("examples/teacher/opd-student.yaml", {"distill.teachers": ["node:opd-teacher"]})
    node = type("N", (), {"cfg": cfg, "transport": object()})()
    with pytest.raises(ConfigError, match="node:opd-teacher.*swarm local"):
        build_distill(node)


def test_swarm_local_gives_a_node_named_teacher_its_peer_id(tmp_path):
    """examples/teacher/opd-student.yaml names `node:opd-teacher`: `swarm local` gives that node an identity file
    before it starts and the student that identity's peer id; the solo control asks no teacher."""
    from argparse import Namespace

    from ops.cli.local import _node_plan
    from swarm.net.identity import load_or_create_identity, peer_id_of_key

    args = Namespace(config=["examples/teacher/opd-student.yaml", "examples/teacher/opd-teacher.yaml"], nodes=2,
                     samplers=None, set=None, rounds=None, control=True, out=str(tmp_path))
    plan = {name: cfg for name, _path, cfg, _extra in _node_plan(args)}
    key = tmp_path / "opd-teacher" / "identity.key"
    assert plan["opd-teacher"].swarm.identity_path == str(key)
    assert plan["opd-student"].distill.teachers == [peer_id_of_key(load_or_create_identity(key)[0])]
    assert plan["opd-student-solo"].distill.teachers == []
    args.set = ["distill.teachers=[node:nobody]"]
    with pytest.raises(ConfigError, match="node:nobody names no node of this run"):
        _node_plan(args)


def test_round_0_across_tokenizers_is_scored(tmp_path):
    """A teacher of another tokenizer refuses our token ids (`wrong_tokenizer`) the first time; the student asks again
    by bytes within the same wait, so round 0 is scored too (it was not: its KL was recorded as 0.0,
    docs/benchmarks/learning.md §12E), and from round 1 on it asks by bytes at once."""
    hub = InMemoryHub()

    def node(name: str, seed: int, spec: str, **distill) -> Node:
        cfg = _config(name, seed, **distill)
        cfg["model"] = {"spec": spec}
        cfg["distill"]["wait_s"] = 60.0
        return Node(parse_config(cfg), tmp_path / name,
                    transport=InMemoryTransport(hub, name, "rlswarm", poll_interval_s=0.01))

    teacher = node("n1", 1, "tiny-llama", serve=True, serve_tokens_per_s=1e9)
    student = node("n0", 0, "tiny-qwen2", teachers=["n1"])
    try:
        rows = []
        for r in range(2):
            run_round(teacher, r)
            rows.append(run_round(student, r).line())
        first, second = rows
        assert first["distill_retried"] == first["distill_requests"] == 1 and first["distill_answers"] == 1, first
        assert first["distill_tokens_scored"] > 0 and not first["distill_drops"], first
        assert second["distill_retried"] == 0 and second["distill_answers"] == 1, second
    finally:
        for n in (teacher, student):
            n.close()
