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


def test_rc3_replays_each_own_group_up_to_three_times_a_step():
    from argparse import Namespace

    from bench.learning.sharing import ARMS, make_jobs

    args = Namespace(seeds=[0], sizes=None, nodes=2, rounds=3, config=CONFIG, delay=1, round_s=10.0)
    matched = {"update": "u", "arm": "C", "nodes": 2, "seed": 0, "rounds": 3, "twin": "rounds",
               "trained_by_round": [[4000] * 3] * 2}
    update = {"loss.name": "f-tis"}
    jobs = make_jobs(args, {"u": update}, {"RC": ARMS["RC"], "RC3": ARMS["RC3"]}, [matched], "rounds", replays=True)
    by_arm = {j["arm"]: j for j in jobs}
    assert by_arm["RC3"]["overrides"] == {**update, "select.replay_repeat": 3} and by_arm["RC"]["overrides"] == update
    assert update == {"loss.name": "f-tis"}  # the update itself is not changed
    over = {"tasks.eval_size": 16, "eval.samples": 1}
    once = run_swarm([CONFIG] * 2, 4, 0, 0, 3, over, generate=4, replay_to=matched["trained_by_round"])
    thrice = run_swarm([CONFIG] * 2, 4, 0, 0, 3, {**over, "select.replay_repeat": 3}, generate=4,
                       replay_to=matched["trained_by_round"])
    # a budget of 4000 tokens is far more than 3 rounds of own groups: thrice takes each up to 3 times, once once
    assert all(t > o > 0 for t, o in zip(thrice["groups_replayed"], once["groups_replayed"])), \
        (once["groups_replayed"], thrice["groups_replayed"])
