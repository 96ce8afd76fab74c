"""An open swarm: real `swarm node` processes on 127.0.0.1 exchange whatever their round, speed or join time.

1. A node that joins a running swarm trains on the others' groups in its first round (started with
   `swarm.start_with_peers=1`, round 0 waits for the peer it met), and they train on its groups within
   a few fan-in windows of its first publication.
2. Two nodes whose rounds differ ≥ 10× in length each train on the other's groups, and the fast
   node's rounds are not slowed down to the slow node's pace: its median round stays within 1.2× of
   an identical node's that runs at the same time, on the same core, in another swarm. Both train on
   I + J = 4 groups of the same shape per step (backfilled with their own when peers' are missing),
   so they do the same work; the slow node is slow because it generates one sequence per generate
   call and takes 64 passes over its batch (train.epochs), so its bundles stay small.
3. kill -9 of one of three nodes: the other two keep going without waiting for it; restarted with
   its identity (and `swarm.start_with_peers=1`), it exchanges again in its first round.
Each assertion waits for the event it checks (a round that names the peer), never for a round number.
Each node is a `tiny-qwen2` node on one torch thread (a random model: `drop_zero_advantage` off so
every group is trainable).
"""

from __future__ import annotations

import os
import signal
import statistics
import time
from pathlib import Path

import pytest
import yaml

from node.round.record import read_lines
from swarm.host.local import Child, start_node, stop_all

pytestmark = pytest.mark.integration


def _config(tmp: Path, name: str, *, prompts: int = 4, group: int = 4, tokens: int = 8, batch: int = 256,
            epochs: int = 1, **swarm) -> str:
    cfg = {
        "name": name, "seed": sum(map(ord, name)) % 1000, "rounds": 10_000, "torch_threads": 1,
        "model": {"spec": "tiny-qwen2"},
        "tasks": {"datasets": [{"name": "chain_sum", "config": {"min_terms": 2, "max_terms": 2, "max_digits": 1}}],
                  "system_prompt": None, "eval_size": 0},
        "generation": {"prompts_per_round": prompts, "group_size": group, "max_new_tokens": tokens,
                       "max_batch_sequences": batch},
        # I = 2 own + J = 2 peers' groups; with too few peers' groups the step backfills with own ones
        "select": {"local_groups": 2, "external_groups": 2, "drop_zero_advantage": False},
        "train": {"epochs": epochs}, "swarm": {"enabled": True, **swarm}, "eval": {"every": 0}, "checkpoint": {"every": 5},
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _rows(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    return read_lines(path) if path.is_file() else []


def _wait_rounds(out: Path, n: int, timeout: float, child: Child) -> list[dict]:
    deadline = time.monotonic() + timeout
    while len(rows := _rows(out)) < n:
        assert child.poll() is None, f"{child.name} exited: {(out / 'node.log').read_text()[-2000:]}"
        assert time.monotonic() < deadline, f"{child.name}: {len(rows)} of {n} rounds in {timeout} s"
        time.sleep(0.5)
    return rows


def _peer_id(out: Path) -> str:
    return (out / "node.log").read_text().split(" peer ", 1)[1].split()[0]


def _start(children, maddrs, tmp_path, name, config, *extra, niceness: int = 0,
           cpus: set[int] | None = None) -> tuple[Child, Path]:
    out = tmp_path / name
    child = start_node(name, config, out, ["--initial-peers", *maddrs, *extra], env={"OMP_NUM_THREADS": "1"},
                       niceness=niceness, cpus=cpus)
    children.append(child)
    return child, out


def test_a_late_joiner_and_the_swarm_train_on_each_other(bootstrap, tmp_path):
    maddrs, children = bootstrap
    a, a_out = _start(children, maddrs, tmp_path, "early", _config(tmp_path, "early"))
    _wait_rounds(a_out, 20, 300, a)  # A runs ≥ 20 rounds alone
    # start_with_peers: B's round 0 starts once it has read A's announcement and waits (wait_s) for A's groups;
    # before, "its first round" was a race between B's first generation and its first fetch of A
    b, b_out = _start(children, maddrs, tmp_path, "late", _config(tmp_path, "late", start_with_peers=1, wait_s=120),
                      "--rounds", "8")
    b_rows = _wait_rounds(b_out, 8, 300, b)
    a_id, b_id = _peer_id(a_out), _peer_id(b_out)
    # B trains on A's groups in its first round (its pool is filled from A's recent bundles)
    assert b_rows[0]["groups_external"] > 0 and b_rows[0]["external_peers"] == [a_id], b_rows[0]
    # A trains on B's groups once it has fetched one: within a few fan-in windows (10 s each) of B's first
    # publication, however many of A's rounds that is on a busy machine
    published = b_rows[0]["time"]
    deadline = time.monotonic() + 3 * 10.0 + 60
    while True:
        a_rows = _rows(a_out)
        if any(b_id in m["external_peers"] for m in a_rows if m["time"] > published):
            break
        assert a.poll() is None and time.monotonic() < deadline, [(m["round"], m["external_peers"]) for m in a_rows[-20:]]
        time.sleep(0.5)
    assert all(m["round_s"] < 10 for m in a_rows), "the running node never waited on the newcomer"


def test_nodes_ten_times_apart_in_speed_train_on_each_other(bootstrap, tmp_path):
    maddrs, children = bootstrap
    # the control runs *at the same time*: an identical fast node in another swarm (same machine, same
    # load, no exchange). On this shared 2-core VM the speed of every process drifts by up to ±50 %
    # between phases of one run, so a control measured before or after the paired rounds cannot bound
    # a 1.2× ratio; a concurrent one shares every drift. The two fast nodes share one core (the
    # scheduler gives them equal turns; left free, whichever one shared a core with the slow node ran
    # up to 20 % slower than the other), the slow node has the other core: each node is pinned with
    # the DHT process and p2pd it starts, so the fast node's daemons' exchange work is on its core.
    cores = sorted(os.sched_getaffinity(0))
    fast_cpus, slow_cpus = ({cores[0]}, {cores[-1]}) if len(cores) >= 2 else (None, None)
    fast_config = _config(tmp_path, "fast", prompts=8)
    fast, fast_out = _start(children, maddrs, tmp_path, "fast", fast_config, cpus=fast_cpus)
    twin, twin_out = _start(children, maddrs, tmp_path, "twin", fast_config, "--swarm-id", "elsewhere",
                            cpus=fast_cpus)
    _wait_rounds(fast_out, 10, 300, fast)
    _wait_rounds(twin_out, 10, 300, twin)
    slow_config = _config(tmp_path, "slow", prompts=32, batch=1, epochs=64)
    slow, slow_out = _start(children, maddrs, tmp_path, "slow", slow_config, "--rounds", "8", cpus=slow_cpus)
    slow_rows = _wait_rounds(slow_out, 8, 600, slow)
    fast_rows, twin_rows = _rows(fast_out), _rows(twin_out)
    assert all(not m["external_peers"] for m in twin_rows), "the other swarm's node exchanged"
    slow_id, fast_id = _peer_id(slow_out), _peer_id(fast_out)
    begin, end = slow_rows[0]["time"] - slow_rows[0]["round_s"], slow_rows[-1]["time"]
    paired = [f for f in fast_rows if begin < f["time"] <= end]
    control = [f for f in twin_rows if begin < f["time"] <= end]
    control_median = statistics.median(m["round_s"] for m in control)
    paired_median = statistics.median(m["round_s"] for m in paired)
    ratio = statistics.median(m["round_s"] for m in slow_rows) / control_median
    assert ratio >= 10, f"slow/fast round time {ratio:.1f}×: the test needs ≥ 10×"
    # every slow round but the first: it trained on the fast node's groups, and the fast node trained
    # on the slow node's groups during that slow round
    hits = 0
    for m in slow_rows[1:]:
        start = m["time"] - m["round_s"]
        fast_during = [f for f in fast_rows if start < f["time"] <= m["time"] + 5]
        hits += fast_id in m["external_peers"] and any(slow_id in f["external_peers"] for f in fast_during)
    assert hits >= 0.8 * (len(slow_rows) - 1), (hits, [(m["round"], m["external_peers"]) for m in slow_rows])
    # waiting on the slow peer would make the fast rounds ≥ 10× longer; what pairing may cost the fast
    # node is its share of the exchange (serving, notifying, taking in the slow node's bundles)
    print(f"fast node paired {paired_median:.4f} s over {len(paired)} rounds, its twin alone "
          f"{control_median:.4f} s over {len(control)} ({paired_median / control_median:.3f}×); slow/fast {ratio:.1f}×")
    assert paired_median <= 1.2 * control_median, (control_median, paired_median)
    # the fast node never waited on the slow one: no gather came near a slow round (≥ 10 fast rounds); an
    # absolute 1 s bound is at the mercy of scheduling on a loaded 2-core machine
    slow_median = statistics.median(m["round_s"] for m in slow_rows)
    assert max(f["gather_s"] for f in paired) < max(1.0, 0.5 * slow_median), ([f["gather_s"] for f in paired], slow_median)


def test_kill_9_of_one_node_stalls_nobody_and_a_restart_exchanges_at_once(bootstrap, tmp_path):
    maddrs, children = bootstrap
    nodes = {}
    for name in ("n0", "n1", "n2"):
        identity = tmp_path / f"{name}.key"
        nodes[name] = _start(children, maddrs, tmp_path, name, _config(tmp_path, name, identity_path=str(identity)))
    for child, out in nodes.values():
        _wait_rounds(out, 8, 300, child)
    victim, victim_out = nodes["n2"]
    os.killpg(victim.proc.pid, signal.SIGKILL)
    victim.proc.wait()
    killed_at = time.time()
    for name in ("n0", "n1"):
        child, out = nodes[name]
        rows = _wait_rounds(out, len(_rows(out)) + 8, 120, child)
        after = [m for m in rows if m["time"] > killed_at]
        assert len(after) >= 8 and max(m["round_s"] for m in after) < 10, [m["round_s"] for m in after]
    before = len(_rows(victim_out))
    # start_with_peers: its round 0 waits until it has read a peer's announcement and for that peer's groups
    # (before, its first round raced its first fetch)
    again, _ = _start(children, maddrs, tmp_path, "n2", str(tmp_path / "n2.yaml"),
                      "--set", "swarm.start_with_peers=1", "--set", "swarm.wait_s=120")
    rows = _wait_rounds(victim_out, before + 3, 300, again)
    assert _peer_id(victim_out) == _peer_id(nodes["n2"][1])  # same identity, same peer id
    resumed = [m for m in rows if m["time"] > killed_at]
    assert resumed[0]["groups_external"] > 0, resumed[0]  # it exchanges in its first round after the restart
    restarted_at = resumed[0]["time"] - resumed[0]["round_s"]
    n2_id = _peer_id(victim_out)
    # the others fetch it within a fan-in window: at these round speeds each spends its
    # max_fetches_per_window budget (16 per window_s = 10 s) in a few seconds, then waits for the next window
    for name in ("n0", "n1"):
        child, out = nodes[name]
        deadline = time.monotonic() + 3 * 10.0 + 30
        while not any(n2_id in m["external_peers"] for m in _rows(out) if m["time"] > restarted_at):
            assert child.poll() is None and time.monotonic() < deadline, name
            time.sleep(0.5)
