"""Adapter averaging between real hivemind peers on 127.0.0.1 (swarm.weights.averaging over the nodes' DHTs).

1. Three peers with tiny-qwen2 LoRA adapters (same seeded init, then perturbed differently)
   average with weights 1, 2, 3: afterwards every peer holds Σ w_n θ_n / Σ w_n for every adapter
   tensor (A and B separately), to within 1e-6 absolute (float32 all-reduce of values ~0.1).
2. A peer that started looking for a group and was then killed (SIGKILL, p2pd included) does not
   block the other two: they average with each other within a bounded time.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from node.models.config import LoraSpec, ModelConfig
from node.models.load import load_model
from swarm.weights.averaging import AdapterAverager

pytestmark = pytest.mark.integration
TOL = 1e-6


def adapter(model) -> list[torch.Tensor]:
    return [p for n, p in model.named_parameters() if "lora_" in n]


def average_all(averagers, tensors, weights, timeout):
    results = [None] * len(averagers)

    def run(i):
        results[i] = averagers[i].average(tensors[i], weight=weights[i], timeout=timeout)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(averagers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return results


def test_three_peers_hold_the_weighted_mean_of_their_adapters(swarm3):
    _, peers = swarm3
    spec = ModelConfig(spec="tiny-qwen2", lora=LoraSpec(r=4, alpha=8, init_seed=3))
    models = [load_model(spec).model for _ in peers]
    tensors = [adapter(m) for m in models]
    names = [n for n, _ in models[0].named_parameters() if "lora_" in n]
    assert any("lora_A" in n for n in names) and any("lora_B" in n for n in names)
    for a, b in zip(tensors[0], tensors[1]):  # the seeded init is the same on every node
        assert torch.equal(a, b)
    with torch.no_grad():
        for i, ts in enumerate(tensors):
            g = torch.Generator().manual_seed(100 + i)
            for t in ts:
                t.add_(0.1 * torch.randn(t.shape, generator=g))
    before = [[t.detach().clone() for t in ts] for ts in tensors]
    weights = [1.0, 2.0, 3.0]
    mean = [sum(w * b[j] for w, b in zip(weights, before)) / sum(weights) for j in range(len(names))]
    numel = sum(t.numel() for t in tensors[0])
    # the group starts as soon as all three joined: a long matchmaking time only lets a slow one join in time
    averagers = [AdapterAverager(ts, p.dht, prefix="test_fedit", target_group_size=3, matchmaking_time_s=30.0,
                                 request_timeout_s=10.0, allreduce_timeout_s=30.0)
                 for ts, p in zip(tensors, peers)]
    try:
        results = average_all(averagers, tensors, weights, timeout=90.0)
    finally:
        for a in averagers:
            a.shutdown()
    for i, (res, ts) in enumerate(zip(results, tensors)):
        assert res.averaged and res.group_size == 3, res
        for name, t, m in zip(names, ts, mean):
            assert (t - m).abs().max().item() <= TOL, name
        # drift = ‖θ_i − mean‖ before averaging; bytes = 2·(3−1)/3·4·numel
        expected_drift = math.sqrt(sum(float((b - m).pow(2).sum()) for b, m in zip(before[i], mean)))
        assert res.drift == pytest.approx(expected_drift, rel=1e-4)
        assert res.bytes == int(2 * 2 / 3 * 4 * numel)
        assert res.seconds < 60


KILLED_PEER = """
import sys, time, torch
from hivemind import DHT
from hivemind.utils import get_dht_time
from swarm.weights.averaging import AdapterAverager
dht = DHT(start=True, initial_peers=[sys.argv[1]], host_maddrs=["/ip4/127.0.0.1/tcp/0"], startup_timeout=60)
avg = AdapterAverager([torch.zeros(6, 4), torch.zeros(5)], dht, prefix="test_killed", target_group_size=3,
                      matchmaking_time_s=4.0, request_timeout_s=2.0, allreduce_timeout_s=20.0)
avg._averager.step(weight=1.0, scheduled_time=get_dht_time() + 30, timeout=300, wait=False)  # declared, waiting
print("looking", flush=True)
time.sleep(600)
"""


def test_a_killed_peer_does_not_block_the_others(swarm3):
    maddrs, peers = swarm3
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "OMP_NUM_THREADS": "1"}
    victim = subprocess.Popen([sys.executable, "-c", KILLED_PEER, maddrs[0]], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    try:
        assert victim.stdout.readline().strip() == b"looking"
        time.sleep(1.0)  # its matchmaking declaration reaches the DHT
    finally:
        os.killpg(victim.pid, signal.SIGKILL)  # the peer, its DHT process and its p2pd
        victim.wait()
    tensors = [[torch.full((6, 4), 1.0), torch.full((5,), -2.0)], [torch.full((6, 4), 3.0), torch.full((5,), 4.0)]]
    averagers = [AdapterAverager(ts, p.dht, prefix="test_killed", target_group_size=3, matchmaking_time_s=4.0,
                                 request_timeout_s=2.0, allreduce_timeout_s=20.0) for ts, p in zip(tensors, peers)]
    started = time.monotonic()
    try:
        results = average_all(averagers, tensors, [1.0, 1.0], timeout=40.0)
    finally:
        for a in averagers:
            a.shutdown()
    elapsed = time.monotonic() - started
    # bounded: average_all's 40 s + the all-reduce's 20 s + shutdown, with slack for a loaded machine; never the
    # killed peer's 300 s
    assert elapsed < 150
    for res, ts in zip(results, tensors):
        assert res.averaged and res.group_size == 2, res
        assert torch.equal(ts[0], torch.full((6, 4), 2.0)) and torch.equal(ts[1], torch.full((5,), 1.0))


def test_swarm_local_runs_the_pubswap_example_end_to_end(tmp_path):
    """examples/federated/pubswap-balanced.yaml on 3 tiny-model clients: round 1 is a public step
    (every client gathers the other two) and the τ = 2 boundary averages all three adapters, which
    the checkpoint then holds as peft files."""
    import json

    sets = ["model.spec=tiny-qwen2", "federated.tau=2", "federated.matchmaking_time_s=30",
            "generation.prompts_per_round=2", "generation.group_size=4", "generation.max_new_tokens=8",
            "eval.every=0", "select.drop_zero_advantage=false"]
    cmd = [sys.executable, "-m", "ops.cli", "local", "--nodes", "3", "--config",
           "examples/federated/pubswap-balanced.yaml", "--rounds", "2", "--out", str(tmp_path)]
    proc = subprocess.run(cmd + [a for s in sets for a in ("--set", s)], capture_output=True, text=True,
                          timeout=240, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    for i in range(3):
        log = (tmp_path / f"balanced-{i}" / "node.log").read_text()
        assert "Dirichlet(α=0.3) split of 4 task families over 3 clients" in log
        assert f"this node is client {i}" in log
        rounds = [json.loads(line) for line in (tmp_path / f"balanced-{i}" / "metrics.jsonl").read_text().splitlines()]
        private, public = rounds
        assert private["public"] is False and private["wire_bytes"] == 0 and private["groups_received"] == 0
        assert public["public"] is True and public["wire_bytes"] > 0
        assert public["pubswap_peer_groups"] == 2 * 2  # 2 other clients × 2 public prompts
        assert public["avg_averaged"] is True and public["avg_group_size"] == 3
    # the averaged round was the last: the three checkpointed adapters are the same mean, and they are
    # standard peft files
    from peft import PeftModel
    from safetensors.torch import load_file

    dirs = [tmp_path / f"balanced-{i}" / "checkpoints" / "round-00000001" / "adapter" for i in range(3)]
    saved = [load_file(d / "adapter_model.safetensors") for d in dirs]
    assert saved[0] and all(saved[0].keys() == s.keys() for s in saved)
    for key in saved[0]:
        assert all((s[key] - saved[0][key]).abs().max().item() <= TOL for s in saved), key
    peft_model = PeftModel.from_pretrained(load_model(ModelConfig(spec="tiny-qwen2")).model, dirs[0])
    loaded = {n: p for n, p in peft_model.named_parameters() if "lora_" in n}
    assert len(loaded) == len(saved[0])
