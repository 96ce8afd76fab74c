"""Findings 1–4 over the network: a hostile peer (a real HivemindTransport) publishes crafted
bundles, and a node on real hivemind peers on 127.0.0.1 runs its rounds against them.

  1  one small bundle whose record has a binary task-config value made `swarm node` exit 1 in
     round 0 (TypeError out of ingest); now the node finishes with exit 0 and counts `bad_task`;
  2  '<answer>' repeated 16k times per completion took ~41 s per completion to verify;
  3  8 completions × 1024 tokens (every wire cap respected) were trained on;
  4  a correct-answer text over unrelated aligned ids was trained on with a positive advantage;
  5  a 4 M-character model name became a 24 MiB metrics line; a group sent twice was trained on twice.
"""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

from node.config import parse_config
from node.node import Node
from node.round.loop import run_round
from protocols.records import (
    Completion,
    ModelInfo,
    RolloutRecord,
    SamplingInfo,
    TaskRef,
)
from swarm.config import SwarmConfig
from swarm.dht.bootstrap import start_bootstrap
from swarm.exchange.hivemind import HivemindTransport
from tests.adversarial.procs import cli

pytestmark = pytest.mark.integration
SWARM = "hostile-test"
CHAIN = {"min_terms": 2, "max_terms": 2, "max_digits": 1}


def _swarm_cfg(maddrs, **kw) -> dict:
    return {"enabled": True, "swarm_id": SWARM, "initial_peers": maddrs[:1], "startup_timeout_s": 120,
            "dht_timeout_s": 5, "wait_s": 15, "poll_interval_s": 0.2, **kw}


def _node_cfg(maddrs) -> dict:
    return {
        "name": "victim", "seed": 0, "rounds": 100, "torch_threads": 1, "model": {"spec": "tiny-qwen2"},
        "tasks": {"datasets": [{"name": "chain_sum", "config": CHAIN}], "system_prompt": None, "eval_size": 0},
        "generation": {"prompts_per_round": 2, "group_size": 4, "max_new_tokens": 8},
        "select": {"local_groups": 2, "external_groups": 4, "drop_zero_advantage": False},
        # backoff_s 0: one hostile identity sends one crafted bundle after another, and each must reach ingest
        # (a peer whose records are all dropped is otherwise backed off: tests/integration/test_ghost_peers.py)
        "swarm": _swarm_cfg(maddrs, backoff_s=0), "eval": {"every": 0}, "checkpoint": {"every": 1000},
        "metrics": {"console": False},
    }


@pytest.fixture(scope="module")
def swarm(tmp_path_factory):
    boot, maddrs = start_bootstrap(startup_timeout_s=120)
    hostile = node = None
    try:
        hostile = HivemindTransport(cfg=SwarmConfig(**_swarm_cfg(maddrs)))
        cfg = parse_config(_node_cfg(maddrs))
        node = Node(cfg, tmp_path_factory.mktemp("victim"), transport=HivemindTransport(cfg=cfg.swarm))
        yield maddrs, hostile, node
    finally:
        if node is not None:
            node.close()
        if hostile is not None:
            hostile.shutdown()
        boot.shutdown()


def _record(node: Node, hostile, round_: int, completions, *, config=None, aligned=True) -> RolloutRecord:
    task = node.tasks.sample(1000 + round_, 1)[0]
    ref = task.ref if config is None else TaskRef(task.ref.dataset, config, task.ref.seed, task.ref.index)
    return RolloutRecord(swarm=SWARM, peer=hostile.peer_id, round=round_, policy_version=0, created_at=time.time(),
                         model=ModelInfo("tiny-qwen2", node.fingerprint if aligned else "e" * 64, node.vocab_size),
                         sampling=SamplingInfo(1.0, 1.0, 1024), task=ref, prompt=node.prompt_of(task),
                         completions=tuple(completions))


def _honest(node: Node, text: str) -> Completion:
    ids = node.tokenizer(text, add_special_tokens=False)["input_ids"] + [node.tokenizer.eos_token_id]
    return Completion(node.tokenizer.decode(ids, skip_special_tokens=True), tuple(ids), (-0.5,) * len(ids), "stop")


def _round_against(swarm, round_: int, records: list[RolloutRecord]) -> dict:
    """The hostile peer publishes `records`; once each reached the victim's transport (ready for ingest, or
    dropped while fetched or decoded), it runs a round."""
    _, hostile, node = swarm
    hostile.publish(records)
    inbox, deadline = node.transport.inbox, time.monotonic() + 120
    while _settled(inbox) < len(records) and time.monotonic() < deadline:
        time.sleep(0.1)
    return run_round(node, round_).line()


def _settled(inbox) -> int:
    """Records ready for the next round plus those dropped since the last (the inbox's own books, under its lock)."""
    with inbox.cond:
        return inbox._pending.count() + sum(inbox._drops.values())


def test_honest_peer_is_trained_on(swarm):
    """The control: the same peer, honest, gets its group trained on (so drops below mean something)."""
    node = swarm[2]
    task = node.tasks.sample(1000, 1)[0]
    comps = [_honest(node, f"<answer>{task.answer}</answer>"), _honest(node, "<answer>-3</answer>")] * 2
    m = _round_against(swarm, 0, [_record(node, swarm[1], 0, comps)])
    assert m["groups_received"] == 1 and m["drops"] == {}, m
    assert swarm[1].peer_id in m["external_peers"]


def test_hostile_config_does_not_crash_the_round(swarm):
    node = swarm[2]
    comps = [_honest(node, "<answer>1</answer>")] * 4
    m = _round_against(swarm, 1, [_record(node, swarm[1], 1, comps, config={**CHAIN, "max_digits": b"\x01"})])
    assert m["drops"] == {"bad_task": 1} and m["groups_received"] == 0, m


def test_answer_tag_spam_is_not_verified_for_seconds(swarm):
    node = swarm[2]
    spam = Completion("<answer>" * 16384, (5, 6, 7, 8), (-0.5,) * 4, "length")
    m = _round_against(swarm, 2, [_record(node, swarm[1], 2, [spam] * 4)])
    # 131,072 characters for 4 tokens: over 128 characters per token of our budget, dropped while decoding
    # (before the decode-time bound it reached ingest and was dropped as ids_text_mismatch)
    assert m["drops"] == {"completion_too_long": 1}, m
    assert m["round_s"] < 60, m  # before: > 160 s of regex for these four completions


def test_completions_beyond_our_budget_are_not_trained(swarm):
    node = swarm[2]
    ids = (40,) * 1024
    long = Completion(node.tokenizer.decode(list(ids), skip_special_tokens=True), ids, (-0.1,) * 1024, "length")
    m = _round_against(swarm, 3, [_record(node, swarm[1], 3, [long] * 8)])
    assert m["drops"] == {"completion_too_long": 1} and m["groups_external"] == 0, m


def test_ids_that_do_not_say_the_text_are_not_trained(swarm):
    node = swarm[2]
    task = node.tasks.sample(1004, 1)[0]
    right = _honest(node, f"<answer>{task.answer}</answer>")
    forged = dataclasses.replace(right, token_ids=tuple(range(20, 26)), logprobs=(-0.1,) * 6)  # within budget
    m = _round_against(swarm, 4, [_record(node, swarm[1], 4, [forged, _honest(node, "<answer>-3</answer>")] * 2)])
    assert m["drops"] == {"ids_text_mismatch": 1} and m["groups_external"] == 0, m


def test_a_peers_model_name_cannot_bloat_the_metrics_line(swarm):
    """One 4 M-character model name wrote a 24 MiB line into metrics.jsonl, every round the peer was fetched (a
    name that long no longer decodes within this node's caps; one of 900,000 characters does)."""
    node = swarm[2]
    task = node.tasks.sample(1005, 1)[0]
    comps = [_honest(node, f"<answer>{task.answer}</answer>"), _honest(node, "<answer>-3</answer>")] * 2
    rec = _record(node, swarm[1], 5, comps)
    rec = dataclasses.replace(rec, model=dataclasses.replace(rec.model, name="N" * 900_000))
    m = _round_against(swarm, 5, [rec])
    line = node.log.path.read_text().splitlines()[-1]
    assert json.loads(line)["round"] == 5 and m["groups_received"] == 1
    assert len(line.encode()) <= 64 << 10, len(line)
    assert len(m["peer_stats"][swarm[1].peer_id]["model"]) <= 64


def test_the_same_group_sent_twice_is_trained_once(swarm):
    """A group arriving again (relayed, or re-sent) was accepted and trained on as often as it came."""
    node = swarm[2]
    task = node.tasks.sample(1006, 1)[0]
    comps = [_honest(node, f"<answer>{task.answer}</answer>"), _honest(node, "<answer>-3</answer>")] * 2
    once = _record(node, swarm[1], 6, comps)
    again = dataclasses.replace(once, created_at=time.time(), completions=tuple(reversed(once.completions)))
    m = _round_against(swarm, 6, [once, again])
    assert m["groups_received"] == 1 and m["drops"] == {"duplicate": 1}, m


def test_swarm_node_process_survives_the_519_byte_bundle(swarm, tmp_path):
    """The original report: `swarm node` exited 1 in round 0. Now: exit 0, `bad_task` counted."""
    maddrs, hostile, node = swarm
    comps = [_honest(node, "<answer>1</answer>")] * 4
    for r in range(2):  # the rounds the process will run
        task = TaskRef("chain_sum", {"min_terms": b"\x02"}, 0, r)
        rec = dataclasses.replace(_record(node, hostile, r, comps), task=task)
        hostile.publish([rec])
    out = tmp_path / "proc"
    proc = cli("node", "--config", "examples/tiny-swarm.yaml", "--rounds", "2", "--out", str(out),
               "--initial-peers", maddrs[0], "--set", f"swarm.swarm_id={SWARM}", "--set", "eval.every=0",
               "--set", "swarm.startup_timeout_s=120", "--set", "swarm.start_with_peers=1", timeout=400)
    # start_with_peers: round 0 starts once the hostile peer's announcement was read, and waits for its records
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert sum(m["drops"].get("bad_task", 0) for m in rows) >= 1, rows
