"""Weight broadcast from a learner to its samplers on real hivemind peers (127.0.0.1): bytes and seconds.

One learner and K samplers, each a HivemindTransport (its own p2p daemon and DHT process, one
bootstrap peer) with the weight channel of swarm.weights.hivemind, all in this process. For each
payload the learner publishes `--versions` new versions (a little noise on every tensor, so each is
new bytes); for each we time, from the moment `publish` is called:

  publish s     serialising nothing (bytes are ready), storing the signed announcement, spawning pushes
  first / all   until the first / the last sampler holds the verified bytes (its take() returns them)
  load s        safetensors bytes → checked and copied into a sampler's model (node.heterorl.weights)

with pushes (the learner pushes its announcement to the samplers it has seen, the default) and
without (`notify_peers` 0: the samplers find it by reading the DHT key every `--poll` seconds).
Payloads: the lab model's full weights, SmolLM2-135M's LoRA adapter (r 16, α 32, all linear
layers: examples/smollm2-swarm.yaml), and with --smollm2-full its full weights. Also: how much zstd
saves on each payload, and on the byte-wise XOR of two versions one real optimizer step apart (lab
model, lab-solo round) — a delta format would only pay if that compressed well.

    python -m bench.exchange.weight_broadcast [--samplers 2] [--versions 5] [--smollm2-full]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np
import torch
import zstandard

from bench.harness.output import results_dir, table, write_json
from node.config import load_config
from node.heterorl.weights import apply_weights, export_weights, weights_format
from node.models.config import LoraSpec, ModelConfig
from node.models.load import load_model
from swarm.config import SwarmConfig
from swarm.dht.bootstrap import start_bootstrap
from swarm.exchange.hivemind import HivemindTransport
from swarm.weights.hivemind import HivemindWeights

RESULTS = results_dir("exchange")


def zstd_ratio(data: bytes) -> float:
    return len(zstandard.ZstdCompressor(level=3).compress(data)) / len(data)


def one_step_delta() -> dict:
    """zstd on the lab model's weights before and after one real round (examples/lab-solo.yaml), and on their XOR."""
    from bench.harness.rounds import play
    from node.node import Node

    cfg = load_config("examples/lab-solo.yaml", {"eval.every": 0, "eval.at_start": False, "metrics.console": False,
                                                 "checkpoint.every": 10**6, "torch_threads": 1})
    with tempfile.TemporaryDirectory() as tmp:
        node = Node(cfg, tmp)
        before = export_weights(node.model)
        play(node, [0])
        after = export_weights(node.model)
        node.close()
    xor = (np.frombuffer(before, np.uint8) ^ np.frombuffer(after, np.uint8)).tobytes()
    return {"bytes": len(after), "zstd_full": zstd_ratio(after), "zstd_xor_delta": zstd_ratio(xor),
            "changed_bytes": float(np.count_nonzero(np.frombuffer(xor, np.uint8))) / len(xor)}


@torch.no_grad()
def _nudge(model) -> None:
    for p in model.parameters():
        if p.requires_grad:
            p.add_(1e-4 * torch.randn_like(p))


def measure(name: str, learner_model, sampler_model, peers, args, push: bool) -> dict:
    lt, samplers = peers
    fmt = weights_format(learner_model)
    learner = HivemindWeights(lt, notify_peers=64 if push else 0, ttl_s=600)
    followers = [HivemindWeights(t, follow=[lt.peer_id], fmt=fmt, poll_interval_s=args.poll, fetch_timeout_s=600)
                 for t in samplers]
    rows = []
    for v in range(args.versions):
        _nudge(learner_model)
        data = export_weights(learner_model)
        t0 = time.perf_counter()
        learner.publish(v, data, fmt)
        published = time.perf_counter() - t0
        arrived: dict[int, float] = {}
        deadline = t0 + 120
        while len(arrived) < len(followers) and time.perf_counter() < deadline:
            for i, f in enumerate(followers):
                if i not in arrived and (u := f.take()) is not None and u.version == v:
                    arrived[i] = time.perf_counter() - t0
            time.sleep(0.002)
        rows.append({"version": v, "publish_s": published, "first_s": min(arrived.values(), default=None),
                     "all_s": max(arrived.values()) if len(arrived) == len(followers) else None})
    t0 = time.perf_counter()
    apply_weights(sampler_model, data, fmt)
    load_s = time.perf_counter() - t0
    drops = {k: v for f in followers for k, v in f.take_drops().items()}
    for channel in [learner, *followers]:
        channel.close()
    steady = rows[1:] or rows  # version 0 also pays for first contact
    return {"payload": name, "push": push, "bytes": len(data), "zstd_ratio": zstd_ratio(data),
            "publish_s": statistics.median(r["publish_s"] for r in steady),
            "first_s": statistics.median(r["first_s"] for r in steady if r["first_s"] is not None),
            "all_s_median": statistics.median(r["all_s"] for r in steady if r["all_s"] is not None),
            "all_s_max": max(r["all_s"] for r in steady if r["all_s"] is not None),
            "delivered": sum(r["all_s"] is not None for r in rows), "versions": len(rows),
            "load_s": load_s, "drops": drops, "per_version": rows}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samplers", type=int, default=2)
    ap.add_argument("--versions", type=int, default=5)
    ap.add_argument("--poll", type=float, default=1.0, help="samplers' DHT poll period (heterorl.poll_interval_s)")
    ap.add_argument("--smollm2-full", action="store_true")
    ap.add_argument("--tag", default="")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    payloads = [("lab-chain-sum full", ModelConfig(spec="lab-chain-sum")),
                ("smollm2-135m LoRA r16", ModelConfig(spec="smollm2-135m", lora=LoraSpec(r=16, alpha=32)))]
    if args.smollm2_full:
        payloads.append(("smollm2-135m full", ModelConfig(spec="smollm2-135m")))
    delta = one_step_delta()
    boot, maddrs = start_bootstrap(startup_timeout_s=60)
    results = []
    for push in (True, False):
        swarm_id = f"bench-weights-{int(push)}-{time.time_ns() % 10**9}"  # each mode its own keys
        cfg = SwarmConfig(enabled=True, swarm_id=swarm_id, initial_peers=maddrs[:1], startup_timeout_s=60,
                          poll_interval_s=0.2)
        transports = [HivemindTransport(cfg=cfg) for _ in range(1 + args.samplers)]
        try:
            for t in transports[1:]:  # samplers publish rollouts: the learner sees them (and pushes to them)
                t.publish([])
            deadline = time.monotonic() + 60
            while transports[0].peers_seen() < args.samplers and time.monotonic() < deadline:
                time.sleep(0.2)
            for name, spec in payloads:
                learner_model, sampler_model = load_model(spec).model, load_model(spec).model
                res = measure(name, learner_model, sampler_model, (transports[0], transports[1:]), args, push)
                print(res | {"per_version": None}, flush=True)
                results.append(res)
        finally:
            for t in transports:
                t.shutdown()
    boot.shutdown()
    print(table(results, ["payload", "push", "bytes", "zstd_ratio", "publish_s", "first_s", "all_s_median",
                          "all_s_max", "delivered", "load_s"]))
    print(f"one lab-solo step: zstd {delta['zstd_full']:.3f} of the full weights, {delta['zstd_xor_delta']:.3f} of "
          f"their XOR delta ({delta['changed_bytes']:.1%} of the bytes changed)")
    write_json(f"weight_broadcast{args.tag}", {"args": vars(args), "results": results, "one_step_delta": delta}, RESULTS)


if __name__ == "__main__":
    main()
