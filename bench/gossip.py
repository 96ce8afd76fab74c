"""Gossip latency and capacity of the hivemind transport: real peers on 127.0.0.1, no model.

Each simulated peer is a real `HivemindTransport` (its own p2p daemon and DHT process) that
behaves like a node's round without generating anything: at the round's start it publishes one
bundle of synthetic records shaped like a lab round (B prompts × G completions × T tokens with
ids, f16 logprobs and text), then gathers that round from the others with the node's own call
(`gather([r], timeout, min_peers=N-1)`). All peers share one clock schedule (round r starts at
t0 + r·period; `time.monotonic()` is system-wide on Linux, so publish and arrival times from
different processes compare directly).

    publish → visible   seconds from the publisher calling `publish` (announce in the DHT
                        included) until a receiver's transport has fetched, verified and decoded
                        the bundle (the moment `gather` can hand it out)
    per pair            p50 / p95 over every (publisher, receiver, round)
    at all peers        per (publisher, round): the latest receiver's latency, p50 / p95
    delivered           pairs that arrived within the round period / pairs expected

Two parts, printed side by side:

  latency    --latency-nodes 4 8: one process per peer (as `swarm local` runs nodes)
  capacity   --capacity 16 32 48 64: peers packed --per-process to a process, levels run in
             order until fewer than --min-delivered (95 %) of pairs arrive within the period

    python -m bench.gossip [--latency-nodes 4 8] [--capacity 16 32 48 64] [--rounds 8]
                           [--period 5] [--poll 0.5]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter

from bench.common import table, write_json

B, G, T = 8, 8, 24  # one lab round: 8 prompts × 8 completions × ~24 tokens


# ---------------------------------------------------------------- worker (one process, k peers)

def synthetic_records(peer: str, round_: int, rng: random.Random, swarm: str = "rlswarm"):
    from protocols.records import (
        Completion,
        ModelInfo,
        RolloutRecord,
        SamplingInfo,
        TaskRef,
    )

    def completion() -> Completion:
        ids = tuple(rng.randrange(1, 4000) for _ in range(T))
        lps = tuple(round(-rng.expovariate(1.0), 3) for _ in range(T))
        return Completion(" ".join(str(i % 97) for i in ids), ids, lps, "stop", float(rng.random() < 0.3))

    return [RolloutRecord(swarm=swarm, peer=peer, round=round_, policy_version=round_,
                          created_at=time.time(), model=ModelInfo("lab-chain-sum", "0" * 64, 4096),
                          sampling=SamplingInfo(1.0, 1.0, 32),
                          task=TaskRef("chain_sum", {"min_terms": 2, "max_terms": 2}, 0, round_ * B + i),
                          prompt=f"What is {i} + {round_}?", completions=tuple(completion() for _ in range(G)))
            for i in range(B)]


def run_peer(t, total: int, t0: float, rounds: int, period: float, log: dict, rng: random.Random) -> None:
    for r in range(rounds):
        time.sleep(max(0.0, t0 + r * period - time.monotonic()))
        records = synthetic_records(t.peer_id, r, rng, t.cfg.swarm_id)
        started = time.monotonic()
        nbytes = t.publish(r, records)
        log["publishes"].append([t.peer_id, r, started, time.monotonic(), nbytes])
        left = t0 + (r + 1) * period - 0.2 - time.monotonic()
        got = t.gather([r], timeout=max(0.0, left), min_peers=total - 1)
        for reason, n in got.drops.items():
            log["drops"][reason] = log["drops"].get(reason, 0) + n


def worker(args) -> None:
    import psutil

    from swarm.config import SwarmConfig
    from swarm.hivemind_transport import HivemindTransport

    # a swarm id per level: the bootstrap keeps earlier levels' announcements (of peers now gone)
    cfg = SwarmConfig(enabled=True, swarm_id=args.swarm_id, initial_peers=[args.initial_peer],
                      poll_interval_s=args.poll,
                      startup_timeout_s=180, gather_timeout_s=args.period)
    log = {"publishes": [], "arrivals": [], "drops": {}}
    started = time.monotonic()
    peers = []
    for _ in range(args.peers):
        t = HivemindTransport(cfg=cfg)
        orig = t.inbox.settle

        def settle(round_, peer, records, drops, _orig=orig, _me=t.peer_id):
            log["arrivals"].append([_me, peer, round_, time.monotonic(), bool(records)])
            _orig(round_, peer, records, drops)

        t.inbox.settle = settle
        peers.append(t)
    me = psutil.Process()  # proportional set size: forked DHT processes share pages with us
    rss = sum(p.memory_full_info().pss for p in [me, *me.children(recursive=True)])
    print(json.dumps({"ready": time.monotonic() - started, "rss": rss}), flush=True)
    t0 = float(sys.stdin.readline())
    threads = [threading.Thread(target=run_peer, args=(t, args.total, t0, args.rounds, args.period, log,
                                                       random.Random(hash(t.peer_id))))
               for t in peers]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    time.sleep(0.5)
    for t in peers:
        t.shutdown()
    with open(args.out, "w") as f:
        json.dump(log, f)


# ---------------------------------------------------------------- orchestrator

def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def run_level(total: int, per_process: int, rounds: int, period: float, poll: float, maddr: str) -> dict:
    import tempfile

    procs, outs = [], []
    tmp = tempfile.mkdtemp(prefix="gossip-")
    n_proc = -(-total // per_process)
    swarm_id = f"gossip-{total}-{per_process}-{int(time.time())}"
    for i in range(n_proc):
        k = min(per_process, total - i * per_process)
        out = os.path.join(tmp, f"w{i}.json")
        outs.append(out)
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "bench.gossip", "--worker", "--peers", str(k), "--total", str(total),
             "--initial-peer", maddr, "--rounds", str(rounds), "--period", str(period), "--poll", str(poll),
             "--swarm-id", swarm_id, "--out", out], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    level = {"peers": total, "processes": n_proc, "rounds": rounds, "period_s": period}
    try:
        ready = [json.loads(p.stdout.readline() or "null") for p in procs]
        if any(r is None for r in ready):
            return {**level, "error": "a worker failed to start its peers"}
        level["startup_s"] = max(r["ready"] for r in ready)
        level["rss_mb_per_peer"] = sum(r["rss"] for r in ready) / total / 2**20
        t0 = time.monotonic() + 2.0
        for p in procs:
            p.stdin.write(f"{t0}\n")
            p.stdin.flush()
        load = []
        for p in procs:
            while p.poll() is None:
                load.append(os.getloadavg()[0])
                time.sleep(1.0)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    logs = [json.load(open(o)) for o in outs if os.path.exists(o)]
    if len(logs) < n_proc:
        return {**level, "error": "a worker exited without results"}
    return {**level, **summarise(logs, total, period), "load_avg_1m": statistics.fmean(load) if load else None}


def summarise(logs: list[dict], total: int, period: float) -> dict:
    pub = {(p, r): (t, done) for log in logs for p, r, t, done, _ in log["publishes"]}
    nbytes = [b for log in logs for *_, b in log["publishes"]]
    pair, per_bundle = [], {}
    for log in logs:
        for recv, src, r, at, ok in log["arrivals"]:
            if ok and (src, r) in pub:
                lat = at - pub[(src, r)][0]
                pair.append(lat)
                per_bundle.setdefault((src, r), []).append(lat)
    expected = len(pub) * (total - 1)
    in_time = sum(lat <= period for lat in pair)
    at_all = [max(v) for k, v in per_bundle.items() if len(v) == total - 1]
    return {
        "bundle_kb": statistics.fmean(nbytes) / 1024,
        "announce_s_p50": pct([d - t for t, d in pub.values()], 0.5),
        "pair_p50_s": pct(pair, 0.5), "pair_p95_s": pct(pair, 0.95),
        "all_p50_s": pct(at_all, 0.5), "all_p95_s": pct(at_all, 0.95),
        "delivered": in_time / expected if expected else 0.0,
        "bundles_at_all": len(at_all) / len(pub) if pub else 0.0,
        "drops": sum(sum(log["drops"].values()) for log in logs),
        "drop_reasons": dict(sum((Counter(log["drops"]) for log in logs), Counter())),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency-nodes", type=int, nargs="*", default=[4, 8])
    ap.add_argument("--capacity", type=int, nargs="*", default=[16, 32, 48, 64])
    ap.add_argument("--per-process", type=int, default=8, help="capacity: simulated peers per process")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--period", type=float, default=5.0, help="seconds per round")
    ap.add_argument("--min-delivered", type=float, default=0.95,
                    help="capacity: stop after the first level delivering fewer pairs within the period")
    ap.add_argument("--poll", type=float, default=0.5, help="swarm.poll_interval_s (the node default)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    for name in ("--peers", "--total"):
        ap.add_argument(name, type=int, help=argparse.SUPPRESS)
    ap.add_argument("--initial-peer", help=argparse.SUPPRESS)
    ap.add_argument("--swarm-id", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)

    import psutil

    from swarm.bootstrap import start_bootstrap

    dht, maddrs = start_bootstrap(startup_timeout_s=120)
    rows = []
    try:
        for n in args.latency_nodes:
            print(f"latency: {n} peers, one per process, {args.rounds} rounds × {args.period:g} s …", flush=True)
            rows.append({"part": "latency", **run_level(n, 1, args.rounds, args.period, args.poll, maddrs[0])})
        for n in args.capacity:
            last = rows[-1] if rows and "rss_mb_per_peer" in rows[-1] else None
            need = n * last["rss_mb_per_peer"] * 2**20 * 1.3 if last else 0
            if need > psutil.virtual_memory().available:
                rows.append({"part": "capacity", "peers": n, "error": f"stopped before: needs ~{need / 2**30:.1f} GiB"})
                break
            print(f"capacity: {n} peers, {args.per_process} per process …", flush=True)
            row = {"part": "capacity", **run_level(n, args.per_process, max(3, args.rounds // 2),
                                                   2 * args.period, args.poll, maddrs[0])}
            rows.append(row)
            if "error" in row or row["delivered"] < args.min_delivered:
                break
    finally:
        dht.shutdown()
    cols = ["part", "peers", "processes", "period_s", "startup_s", "rss_mb_per_peer", "bundle_kb", "announce_s_p50",
            "pair_p50_s", "pair_p95_s", "all_p50_s", "all_p95_s", "delivered", "drops", "load_avg_1m"]
    print(table(rows, cols))
    for r in rows:
        if "error" in r:
            print(f"{r['peers']} peers: {r['error']}")
        elif r["drop_reasons"]:
            print(f"{r['part']} {r['peers']} peers, drops (per record or bundle): {r['drop_reasons']}")
    print("wrote", write_json("gossip", {"poll_interval_s": args.poll, "record_shape": {"B": B, "G": G, "T": T},
                                         "rows": rows}))


if __name__ == "__main__":
    main()
