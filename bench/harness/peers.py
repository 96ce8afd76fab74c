"""Real hivemind peers that behave like nodes without a model, and the records they publish.

    synthetic_records   one lab round's records (B prompts × G completions × T tokens with ids, logprobs, text)
    run_level           N such peers in worker processes (`python -m bench.harness.peers`, k peers each, on
                        loopback or each worker on a host of its own: `places`) on one bootstrap: each publishes a bundle every `period` seconds (its own offset) and takes
                        what arrived, as `run_round` does; returns fan-in, pair latency, DHT costs, CPU, and
                        with `gossip` the peers' gossip counters
    summarise, dht_costs, cpu_and_gossip, cpu_seconds, pct   what a level's worker logs add up to

`time.monotonic()` is system-wide on Linux, so publish and arrival times from different processes compare
directly. Each worker installs bench.harness.dht_probe before its first DHT, so the DHT costs are measured.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter

B, G, T = 8, 8, 24  # one lab round: 8 prompts × 8 completions × ~24 tokens


# ---------------------------------------------------------------- worker (one process, k peers)

def synthetic_records(peer: str, round_: int, rng: random.Random, swarm: str):
    from bench.harness.records import completion, record

    def one():
        ids = tuple(rng.randrange(1, 4000) for _ in range(T))
        lps = tuple(round(-rng.expovariate(1.0), 3) for _ in range(T))
        return completion(" ".join(str(i % 97) for i in ids), ids=ids, logprobs=lps, reward=float(rng.random() < 0.3))

    return [record(peer, round_ * B + i, round_=round_, swarm=swarm, completions=[one() for _ in range(G)],
                   model="lab-chain-sum", fingerprint="0" * 64, vocab=4096, created_at=time.time(),
                   sampling=(1.0, 1.0, 32), params={"min_terms": 2, "max_terms": 2}, prompt=f"What is {i} + {round_}?")
            for i in range(B)]


def run_peer(t, t0: float, rounds: int, period: float, log: dict, rng: random.Random, judge: bool = False) -> None:
    """`rounds` publishes of synthetic records every `period` s from `t0`, a take after each; `judge`: every record
    taken counts as used (Transport.judge, as a node's ingest would), so its senders earn good standing."""
    offset = rng.uniform(0, period)  # peers publish at their own pace, not in lockstep
    for r in range(rounds):
        time.sleep(max(0.0, t0 + offset + r * period - time.monotonic()))
        records = synthetic_records(t.peer_id, r, rng, t.cfg.swarm_id)
        started = time.monotonic()
        t.publish(records)
        log["publishes"].append([t.peer_id, r, started])
        got = t.take()
        if judge and got.records:
            t.judge(dict.fromkeys({rec.peer for rec in got.records}, (1, 0)))
        log["rounds"].append([t.peer_id, r, got.bytes, len(got.records), got.skipped])
        for reason, n in got.drops.items():
            log["drops"][reason] = log["drops"].get(reason, 0) + n
        for what, n in got.refused.items():  # streams this peer refused, bundles declined, dials not made
            log.setdefault("refused", {})[what] = log.get("refused", {}).get(what, 0) + n


def worker(args) -> None:
    from bench.harness import dht_probe
    from swarm.config import SwarmConfig
    from swarm.exchange.hivemind import HivemindTransport

    dht_probe.install()  # before the first DHT: every DHT child of this worker counts what it serves
    cfg = SwarmConfig(enabled=True, swarm_id=args.swarm_id, initial_peers=[args.initial_peer],
                      startup_timeout_s=180, max_fetches_per_window=args.budget, notify_peers=args.notify,
                      dht_read_beam=args.beam or 0, poll_interval_s=args.poll_interval or 0.5,
                      gossip=bool(args.gossip),
                      **({"host_maddrs": [f"/ip4/{args.host_addr}/tcp/0"]} if args.host_addr else {}),
                      **({"gossip_poll_every": args.gossip_poll_every} if args.gossip_poll_every else {}),
                      **json.loads(args.swarm_set or "{}"))
    log = {"publishes": [], "arrivals": [], "rounds": [], "drops": {}, "reads": [], "served": []}
    started = time.monotonic()
    peers = []
    for _ in range(args.peers):
        t = HivemindTransport(cfg=cfg)
        orig = t.inbox.settle

        def settle(ann, records, drops, _orig=orig, _me=t.peer_id):
            if records:
                log["arrivals"].append([_me, ann.peer, records[0].round, time.monotonic()])
            _orig(ann, records, drops)

        t.inbox.settle = settle
        peers.append(t)
    print(json.dumps({"ready": time.monotonic() - started}), flush=True)
    t0 = float(sys.stdin.readline())
    reads: list = []
    for t in peers:
        dht_probe.time_reads(t, reads)
    served0 = [dht_probe.served(t.dht) for t in peers]
    cpu0, wall0 = cpu_seconds(), time.monotonic()
    threads = [threading.Thread(target=run_peer, args=(t, t0, args.rounds, args.period, log,
                                                       random.Random(t.peer_id))) for t in peers]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    log["served"] = [[a, dht_probe.served(t.dht)] for a, t in zip(served0, peers)]
    log["cpu"] = [cpu_seconds() - cpu0, time.monotonic() - wall0, len(peers)]
    log["gossip"] = {k: sum(getattr(t.gossip, k, 0) for t in peers if t.gossip)
                     for k in ("received", "offered", "published", "publish_failures", "fetch_spread")}
    log["gossip"]["running"] = sum(t.gossip is not None for t in peers)
    # each running peer's shard level (-1: unsharded) and topics at the end, summed: / running gives the mean
    log["gossip"]["level_total"] = sum(t.gossip.level for t in peers if t.gossip)
    log["gossip"]["topics_total"] = sum(len(t.gossip.topics) for t in peers if t.gossip)
    log["gossip"]["dht_polls_skipped"] = sum(t.poll_gate.skipped for t in peers)
    log["reads"] = reads
    time.sleep(1.0)
    for t in peers:
        t.shutdown()
    with open(args.out, "w") as f:
        json.dump(log, f)


def _default(field: str):
    from swarm.config import SwarmConfig

    return SwarmConfig.model_fields[field].default


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds of a process and its live descendants (a worker: its DHT processes and p2pds)."""
    import psutil

    proc = psutil.Process(pid)
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


# ---------------------------------------------------------------- orchestrator

def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def run_level(total: int, *, per_process: int, rounds: int, period: float, budget: int, notify: int,
              maddr: str, beam: int = 0, poll_interval: float = 0.5, gossip: bool = False,
              swarm_id: str | None = None, gossip_poll_every: int | None = None,
              places: list[tuple[list[str], str]] | None = None, swarm_set: dict | None = None) -> dict:
    """`swarm_set`: SwarmConfig fields every peer gets on top (a row names them). With `places`, worker i runs as `places[i][0] + [python, …]` (e.g. `ip netns exec <host>`) and its peers
    listen on `places[i][1]` (one entry per worker; otherwise each listens on loopback)."""
    procs, outs = [], []
    tmp = tempfile.mkdtemp(prefix="gossip-")
    n_proc = -(-total // per_process)
    swarm_id = swarm_id or f"gossip-{total}-{budget}-{notify}-{int(time.time())}"  # earlier levels' peers are gone
    for i in range(n_proc):
        k = min(per_process, total - i * per_process)
        outs.append(os.path.join(tmp, f"w{i}.json"))
        prefix, addr = places[i] if places else ([], None)
        procs.append(subprocess.Popen(
            [*prefix, sys.executable, "-m", "bench.harness.peers", "--peers", str(k), "--initial-peer", maddr,
             "--rounds", str(rounds), "--period", str(period), "--budget", str(budget), "--notify", str(notify),
             "--swarm-id", swarm_id, "--out", outs[-1], "--beam", str(beam),
             "--poll-interval", str(poll_interval), *(["--gossip", "1"] if gossip else []),
             *(["--gossip-poll-every", str(gossip_poll_every)] if gossip and gossip_poll_every else []),
             *(["--host-addr", addr] if addr else []),
             *(["--swarm-set", json.dumps(swarm_set)] if swarm_set else [])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    level = {"peers": total, "processes": n_proc, "budget": budget, "notify": notify, "period_s": period,
             "dht_read_beam": beam, "poll_interval_s": poll_interval, "transport": "gossip" if gossip else "dht",
             **({"gossip_poll_every": gossip_poll_every or _default("gossip_poll_every")} if gossip else {}),
             **({"swarm_set": swarm_set} if swarm_set else {})}
    load = []
    try:
        ready = [json.loads(p.stdout.readline() or "null") for p in procs]
        if any(r is None for r in ready):
            return {**level, "error": "a worker failed to start its peers"}
        t0 = time.monotonic() + 2.0
        for p in procs:
            p.stdin.write(f"{t0}\n")
            p.stdin.flush()
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
    return {**level, **summarise(logs), "load_avg_1m": statistics.fmean(load) if load else None}


def summarise(logs: list[dict]) -> dict:
    pub = {(p, r): t for log in logs for p, r, t in log["publishes"]}
    lat = [at - pub[(src, r)] for log in logs for _, src, r, at in log["arrivals"] if (src, r) in pub]
    rounds = [x for log in logs for x in log["rounds"]][len(logs):]  # skip each worker's first take
    return {
        "kb_per_round": statistics.fmean(b for *_, b, _, _ in rounds) / 1024 if rounds else 0.0,
        "records_per_round": statistics.fmean(n for *_, n, _ in rounds) if rounds else 0.0,
        "pair_p50_s": pct(lat, 0.5), "pair_p95_s": pct(lat, 0.95),
        "fetched_pairs": len(lat),
        "skipped": sum(s for *_, s in rounds),
        "drop_reasons": dict(sum((Counter(log["drops"]) for log in logs), Counter())),
        "refused": dict(sum((Counter(log.get("refused", {})) for log in logs), Counter())),
        **dht_costs(logs),
        **cpu_and_gossip(logs),
    }


def cpu_and_gossip(logs: list[dict]) -> dict:
    """CPU the peers' processes used (their DHT processes and p2pds included) per peer, as a share of one core, over
    the measured rounds; and the gossip counters summed over the peers."""
    out: dict = {}
    cpu = [log["cpu"] for log in logs if log.get("cpu")]
    if cpu:
        out["cpu_cores_per_peer"] = sum(c for c, _, _ in cpu) / sum(w * n for _, w, n in cpu)
    if any(log.get("gossip") for log in logs):
        out["gossip"] = dict(sum((Counter(log.get("gossip", {})) for log in logs), Counter()))
    return out


def dht_costs(logs: list[dict]) -> dict:
    """What the DHT polling costs (bench.harness.dht_probe): each poll read's latency and entries, and what each
    peer's DHT process served as a key holder, per second, over the measured rounds."""
    reads = [r for log in logs for r in log.get("reads", [])]
    served = [(a, b) for log in logs for a, b in log.get("served", [])]
    if not served:
        return {}
    rate = [(b["find_requests"] - a["find_requests"]) / max(1e-9, b["t"] - a["t"]) for a, b in served]
    kib_s = [(b["find_bytes"] - a["find_bytes"]) / 1024 / max(1e-9, b["t"] - a["t"]) for a, b in served]
    return {"read_p50_s": pct([r[1] for r in reads], 0.5), "read_p95_s": pct([r[1] for r in reads], 0.95),
            "reads_per_peer_s": len(reads) / len(served) / statistics.fmean(b["t"] - a["t"] for a, b in served),
            "entries_per_read": statistics.fmean(r[3] for r in reads) if reads else None,
            "finds_per_read": (sum(b["find_requests"] - a["find_requests"] for a, b in served) / len(reads)
                               if reads else None),  # find requests one poll read costs the swarm
            "holder_finds_per_s_mean": statistics.fmean(rate), "holder_finds_per_s_max": max(rate),
            "holder_kib_per_s_mean": statistics.fmean(kib_s), "holder_kib_per_s_max": max(kib_s)}


def main(argv: list[str] | None = None) -> None:
    """One worker process: --peers peers on --initial-peer; prints {"ready"}, starts at the time read from stdin."""
    ap = argparse.ArgumentParser(description="worker of run_level (k peers in one process)")
    for name in ("--peers", "--rounds", "--budget", "--notify", "--beam", "--gossip", "--gossip-poll-every"):
        ap.add_argument(name, type=int)
    ap.add_argument("--period", type=float)
    ap.add_argument("--poll-interval", type=float)
    ap.add_argument("--initial-peer")
    ap.add_argument("--host-addr", help="the address the peers listen on (/ip4/<it>/tcp/0; default loopback)")
    ap.add_argument("--swarm-id")
    ap.add_argument("--swarm-set", help="SwarmConfig fields as a JSON object, on top of the others")
    ap.add_argument("--out")
    worker(ap.parse_args(argv))


if __name__ == "__main__":
    main()
