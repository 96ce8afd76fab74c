"""On-policy distillation over real hivemind peers on 127.0.0.1: a teacher node serving scores on the score
stream (swarm/exchange/score_stream.py), a student node asking it each round, a hostile teacher whose answers the
student drops, a requester beyond its share refused at once while the teacher's budget holds, and a crowd of
identities that cannot take the part of a student the teacher names."""

from __future__ import annotations

import concurrent.futures
import time

import pytest

from node.config import load_config
from node.node import Node
from node.round.loop import run_round
from protocols.score import ScoreCompletion, ScoreRequest, encode_score_request
from swarm.exchange.score_stream import HivemindScoreLink, ScoreFailed
from tests.integration.conftest import transport_swarm
from tests.unit.node.test_distill_serve import _hostile

pytestmark = pytest.mark.integration
BASE = {"swarm.enabled": True, "eval.every": 0, "eval.at_start": False, "metrics.console": False, "torch_threads": 1,
        "generation.prompts_per_round": 2, "checkpoint.every": 1000, "distill.wait_s": 20.0}
RATE, BURST_S, SHARE = 5.0, 160.0, 0.5  # the teacher's budget: 800 tokens in a burst, 400 for one requester;
# a slow refill, so the share runs out however slowly a loaded machine sends the requests


@pytest.fixture(scope="module")
def swarm():
    with transport_swarm(4, poll_interval_s=0.2, fetch_timeout_s=5) as (_maddrs, peers):
        yield peers


def _node(tmp_path, name: str, transport, **over) -> Node:
    cfg = load_config("examples/lab-solo.yaml", {**BASE, "name": name, **over})
    return Node(cfg, tmp_path / name, transport=transport)


def test_a_student_trains_on_its_teachers_scores_and_drops_a_hostile_teachers(swarm, tmp_path):
    teacher_t, student_t, hostile_t, _ = swarm
    teacher = _node(tmp_path, "teacher", teacher_t, **{"distill.serve": True, "train.lr": 0.0,
                                                      "distill.serve_tokens_per_s": 1e6})
    student = _node(tmp_path, "student", student_t, **{"distill.teachers": [teacher_t.peer_id]})
    hostile = HivemindScoreLink(hostile_t, max_bytes=1 << 20, timeout_s=10)
    hostile.serve(_hostile("nan"))
    try:
        run_round(teacher, 0)  # its announcement carries its addresses
        m = run_round(student, 0).line()
        assert m["distill_teacher"] == teacher_t.peer_id
        assert m["distill_answers"] == m["distill_requests"] == 2, m
        assert m["distill_tokens_scored"] > 0 and m["distill_share_scored"] > 0.9
        assert m["distill_lambda"] == 1.0 and "distill_kl" in m  # the loss used the scores
        served = teacher.distill.served()
        assert served["distill_served"] == {"ok": 2}
        assert served["distill_served_tokens"] == m["distill_tokens_scored"]
        # the same student told to trust the hostile peer: every answer dropped, the round trains on the reward
        student.cfg.distill.teachers[:] = [hostile_t.peer_id]
        m = run_round(student, 1).line()
        assert m["distill_teacher"] == hostile_t.peer_id
        assert m["distill_drops"] == {"bad_logprob": 2} and m["distill_answers"] == 0, m
        assert m.get("distill_scored_share", 0.0) == 0.0  # no token trained towards the hostile values
    finally:
        hostile.close()
        student.distill.close()
        teacher.distill.close()


def test_a_requester_beyond_its_share_is_refused_and_the_budget_holds(swarm, tmp_path):
    teacher_t, _, _, greedy_t = swarm
    teacher = _node(tmp_path, "teacher2", teacher_t, **{"distill.serve": True, "train.lr": 0.0,
                                                       "distill.serve_tokens_per_s": RATE,
                                                       "distill.serve_burst_s": BURST_S, "distill.serve_share": SHARE})
    greedy = HivemindScoreLink(greedy_t, max_bytes=1 << 20, timeout_s=20)
    tok = teacher.tokenizer
    text = "<answer>tenalp</answer>"
    ids = tuple(tok(text, add_special_tokens=False)["input_ids"])
    request = encode_score_request(ScoreRequest("rlswarm", "User: spell it backwards: planet\n\nAssistant:",
                                                (ScoreCompletion(text, token_ids=ids),) * 4,
                                                tokenizer=teacher.fingerprint, vocab_size=teacher.vocab_size))
    try:
        started = time.monotonic()
        outcomes = []
        for _ in range(12):  # as fast as the teacher answers
            try:
                greedy.ask(teacher_t.peer_id, request).result(timeout=30)
                outcomes.append("ok")
            except ScoreFailed as exc:
                outcomes.append(exc.reason)
            except concurrent.futures.TimeoutError:
                outcomes.append("timeout")
        elapsed = time.monotonic() - started
        assert outcomes[0] == "ok" and "refused:over_share" in outcomes, outcomes
        counts, _, computed = teacher.distill.service.take_counts()
        assert counts.get("over_share", 0) == outcomes.count("refused:over_share")
        assert computed <= RATE * SHARE * (BURST_S + elapsed)  # never more than the requester's share
    finally:
        greedy.close()
        teacher.distill.close()


def test_a_crowd_of_identities_cannot_starve_a_student_the_teacher_names(swarm, tmp_path):
    """Two identities asking as fast as the teacher answers (the review: two identities took all of the budget)
    share the strangers' quarter; the student the teacher names (`distill.serve_students`) keeps its part."""
    teacher_t, student_t, sybil1_t, sybil2_t = swarm
    teacher = _node(tmp_path, "teacher3", teacher_t, **{
        "distill.serve": True, "train.lr": 0.0, "distill.serve_tokens_per_s": 100.0, "distill.serve_burst_s": 40.0,
        "distill.serve_students": [student_t.peer_id], "distill.serve_stranger_share": 0.25})
    links = [HivemindScoreLink(t, max_bytes=1 << 20, timeout_s=20) for t in (sybil1_t, sybil2_t, student_t)]
    tok = teacher.tokenizer
    text = "<answer>tenalp</answer>"
    ids = tuple(tok(text, add_special_tokens=False)["input_ids"])
    request = encode_score_request(ScoreRequest("rlswarm", "User: spell it backwards: planet\n\nAssistant:",
                                                (ScoreCompletion(text, token_ids=ids),) * 4,
                                                tokenizer=teacher.fingerprint, vocab_size=teacher.vocab_size))

    def outcome(link) -> str:
        try:
            link.ask(teacher_t.peer_id, request).result(timeout=30)
            return "ok"
        except ScoreFailed as exc:
            return exc.reason

    try:
        crowd = [outcome(link) for _ in range(12) for link in links[:2]]
        assert crowd.count("ok") >= 1 and crowd[-2:] != ["ok", "ok"], crowd  # the strangers ran their pool dry
        student = [outcome(links[2]) for _ in range(4)]
        assert student == ["ok"] * 4, (crowd, student)
    finally:
        for link in links:
            link.close()
        teacher.distill.close()
