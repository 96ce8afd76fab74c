"""What one hostile peer can make a node spend, measured over real hivemind peers on 127.0.0.1
(docs/benchmarks/reliability.md §15B; the attacks: bench/harness/attacks.py; the bounds: docs/PROTOCOL.md §8).

    memory   victims whose transports take what arrived every 0.1 s (a lab node's round) and every 30 s (a GPU
             node's round), each decoding under a receiver budget of --budget tokens per completion, while
             two bombers send them decode bombs for --minutes, five a second each: the wire-cap bomb (4 × 63
             × 8192 equal tokens in ~6 KB: refused while decompressing, and its sender backed off) and the
             budget bomb (256 completions of exactly the budget: every cap met, decoded in full, and never
             judged, as nothing ingests them). Each victim is its own process; its RSS is sampled every second.
             Goal: ≤ +64 MiB over the RSS it had before the attack.
    shares   a victim, H honest peers publishing a bundle a second and one peer in good standing pushing
             ten a second (H = 1, 2, 4; --share-s each): the honest peers' share of the victim's fetches.
             Goal: ≥ H / (H + 1) − 10 %.

    python -m bench.reliability.exhaustion memory [--minutes 10] [--budget 256]
    python -m bench.reliability.exhaustion shares [--share-s 60]
Results: bench/results/reliability/exhaustion_<what>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from bench.harness.output import machine, results_dir, write_json

RESULTS = results_dir("reliability")

ROOT = Path(__file__).resolve().parents[2]


def _transport(maddr: str, **kw):
    from swarm.config import SwarmConfig
    from swarm.exchange.hivemind import HivemindTransport
    return HivemindTransport(cfg=SwarmConfig(**{"enabled": True, "initial_peers": [maddr], "startup_timeout_s": 120,
                                                "dht_timeout_s": 10, "poll_interval_s": 0.5, **kw}))


def _record(peer: str, index: int, tokens: int = 3, completions: int = 4):
    from bench.harness.records import completion, record

    comps = [completion(f"<answer>{index}</answer> {j}" + "x" * max(0, tokens - 16), tokens, first=5)
             for j in range(completions)]
    return record(peer, index, completions=comps, model="bench", fingerprint="a" * 64, created_at=time.time(),
                  sampling=(1.0, 1.0, 16), params={"min_terms": 2}, prompt=f"What is {index}?")


# ---------------------------------------------------------------- memory: victim and bomber processes

def victim(args) -> None:
    """A transport that takes what arrived every --take-every s, printing its RSS as JSON lines every second."""
    import psutil
    t = _transport(args.maddr)
    t.limit_completions(args.budget)
    t.publish([])
    proc = psutil.Process()
    drops: Counter = Counter()
    next_take = time.monotonic()
    while True:
        if time.monotonic() >= next_take:
            drops.update(t.take().drops)
            next_take += args.take_every
        print(json.dumps({"t": time.time(), "rss_mib": proc.memory_info().rss / 2**20, "drops": dict(drops),
                          "pending_mib": t.inbox._pending.total / 2**20}), flush=True)
        time.sleep(min(1.0, max(0.01, next_take - time.monotonic())))


def bomber(args) -> None:
    """Sends decode bombs of one kind (--kind) to every peer it knows, five a second."""
    from bench.harness.attacks import bomb_bundle, publish_raw
    from protocols.codec import encode_bundle
    t = _transport(args.maddr)
    t.publish([])
    k = 0
    while True:
        if args.kind == "wire":  # within every wire cap: ~2^21 equal tokens in ~6 KB
            data, count = bomb_bundle(_record(t.peer_id, k))
        else:  # within every cap of the receiver too: 64 records of 4 completions of exactly its budget
            recs = [_record(t.peer_id, 100_000 + 64 * k + i, tokens=args.budget) for i in range(64)]
            data, count = encode_bundle(recs), 64
        try:
            publish_raw(t, data, count)
        except TimeoutError:  # our DHT store was slow: the pushes went out, the next bomb follows
            pass
        k += 1
        time.sleep(0.2)


def memory(args) -> dict:
    from swarm.dht.bootstrap import start_bootstrap
    boot, maddrs = start_bootstrap(startup_timeout_s=120)
    procs, series = {}, {}
    cmd = [sys.executable, "-m", "bench.reliability.exhaustion"]
    try:
        for name, every in (("round_0.1s", 0.1), ("round_30s", 30.0)):
            procs[name] = subprocess.Popen(cmd + ["_victim", "--maddr", maddrs[0], "--take-every", str(every),
                                                  "--budget", str(args.budget)], cwd=ROOT, stdout=subprocess.PIPE,
                                           text=True)
            series[name] = []
            threading.Thread(target=lambda n=name: [series[n].append(json.loads(line)) for line in procs[n].stdout],
                             daemon=True).start()
        time.sleep(args.warmup_s)  # the victims settle before the attack
        base = {n: max(r["rss_mib"] for r in s[-10:]) for n, s in series.items()}
        started = time.time()
        for kind in ("wire", "budget"):
            procs[f"bomber_{kind}"] = subprocess.Popen(cmd + ["_bomber", "--maddr", maddrs[0], "--budget",
                                                              str(args.budget), "--kind", kind],
                                                       cwd=ROOT, stdout=subprocess.DEVNULL)
        while time.time() - started < args.minutes * 60:
            time.sleep(30)
            now = {n: s[-1] for n, s in series.items() if s}
            print(f"[exhaustion] {(time.time() - started) / 60:.1f} / {args.minutes} min: " + "; ".join(
                f"{n} RSS {r['rss_mib'] - base[n]:+.1f} MiB, pending {r['pending_mib']:.1f} MiB" for n, r in now.items()),
                flush=True)
    finally:
        for p in procs.values():
            p.kill()
        boot.shutdown()
    out = {"budget": args.budget, "minutes": args.minutes, "victims": {}}
    for name, s in series.items():
        during = [r for r in s if r["t"] >= started]
        out["victims"][name] = {
            "rss_before_mib": round(base[name], 1), "rss_max_mib": round(max(r["rss_mib"] for r in during), 1),
            "grown_max_mib": round(max(r["rss_mib"] for r in during) - base[name], 1),
            "grown_end_mib": round(during[-1]["rss_mib"] - base[name], 1),
            "pending_max_mib": round(max(r["pending_mib"] for r in during), 1), "drops": during[-1]["drops"],
            "goal_le_64mib": max(r["rss_mib"] for r in during) - base[name] <= 64}
    return out


# ---------------------------------------------------------------- shares: one process

def shares(args) -> dict:
    from bench.harness.attacks import offer, publish_records
    from protocols.codec import encode_bundle
    from swarm.dht.bootstrap import start_bootstrap
    rows = []
    for h in (1, 2, 4):
        boot, maddrs = start_bootstrap(startup_timeout_s=120)
        made = []
        try:
            victim = _transport(maddrs[0], poll_interval_s=0.2)
            honest = [_transport(maddrs[0]) for _ in range(h)]
            pusher = _transport(maddrs[0])
            made = [victim, *honest, pusher]
            for t in made:
                t.publish([])
            deadline = time.monotonic() + 60
            while victim.peers_seen() < h + 1 and time.monotonic() < deadline:
                time.sleep(0.2)
            start, stop = time.time(), time.time() + args.share_s

            async def push_fast() -> Counter:
                answers, k = Counter(), 0
                while time.time() < stop:
                    data = encode_bundle([_record(pusher.peer_id, 10_000 + k)])
                    answers[(await offer(pusher, victim.peer_id, victim.addrs.split(), data, 1))[:8]] += 1
                    k += 1
                    await asyncio.sleep(0.1)
                return answers
            fut = asyncio.run_coroutine_threadsafe(push_fast(), pusher._loop)
            k = 0
            while time.time() < stop:
                for i, t in enumerate(honest):
                    publish_records(t, [_record(t.peer_id, 1000 * k + i)])
                victim.take()
                for t in (*honest, pusher):  # every peer in good standing, as a node that used their records
                    victim.inbox.standing.good(t.peer_id, time.time())
                k += 1
                time.sleep(1.0)
            answers = fut.result(60)
            with victim.inbox.cond:
                counts = Counter(p for t0, p, _ in victim.inbox._fetch_log if t0 >= start)
            got = sum(counts[t.peer_id] for t in honest)
            share = got / max(1, sum(counts.values()))
            rows.append({"honest": h, "seconds": args.share_s, "fetches_honest": got,
                         "fetches_pusher": counts[pusher.peer_id], "pusher_offers": dict(answers),
                         "honest_share": round(share, 3), "goal": round(h / (h + 1) - 0.1, 3),
                         "goal_met": share >= h / (h + 1) - 0.1})
            print(f"[exhaustion] H={h}: honest share {share:.3f} (goal ≥ {h / (h + 1) - 0.1:.3f}); "
                  f"pusher offers {dict(answers)}", flush=True)
        finally:
            for t in made:
                t.shutdown()
            boot.shutdown()
    return {"rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["memory", "shares", "_victim", "_bomber"])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--budget", type=int, default=256)
    ap.add_argument("--warmup-s", type=float, default=40.0)
    ap.add_argument("--share-s", type=float, default=60.0)
    ap.add_argument("--maddr")
    ap.add_argument("--take-every", type=float, default=0.1)
    ap.add_argument("--kind", choices=["wire", "budget"], default="wire")
    args = ap.parse_args()
    if args.what == "_victim":
        return victim(args)
    if args.what == "_bomber":
        return bomber(args)
    result = memory(args) if args.what == "memory" else shares(args)
    path = write_json(f"exhaustion_{args.what}", {"machine": machine(), "args": vars(args), **result}, RESULTS)
    print(json.dumps(result, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
