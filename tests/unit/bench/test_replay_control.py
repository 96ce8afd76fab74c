"""The replay control of the sharing bench (bench.harness.swarm.run_swarm with `replay_to`): the node alone, on the
deterministic twin. An update's options must not give it peers' groups: `select.external_tokens` replaces J by a
token budget, and with it the RC arm of §13I's f-tis+grow update trained on its peer's groups exactly as C did."""

from __future__ import annotations

from bench.harness.swarm import run_swarm

CONFIG = "examples/papers/sapo-binary.yaml"  # the sharing bench's default (lab-spell)


def test_a_replay_control_takes_no_peers_groups_whatever_the_update_sets():
    rounds = 3
    over = {"select.external_tokens": 256, "select.prefer": "useful", "tasks.eval_size": 16, "eval.samples": 1}
    run = run_swarm([CONFIG] * 2, 4, 0, 0, rounds, over, generate=4, replay_to=[[4000] * rounds] * 2)
    assert run["groups_received"][0] > 0  # its peer's groups arrived (delivered from round 1) ...
    assert run["external_groups"] == [0, 0]  # ... and neither node trained on them
    assert all(n > 0 for n in run["groups_replayed"])  # it replayed its own instead
