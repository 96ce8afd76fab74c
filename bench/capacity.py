"""How many real peers this machine holds (issue 27 item 4): N real HivemindTransport peers at once.

Each peer is a full transport (its own p2p daemon and hivemind DHT process, one bootstrap for all) that
behaves like a node without a model, exactly as in bench/gossip.py (whose workers this reuses, `per_process`
peers per process): every `period` seconds it publishes one lab-round bundle (8 groups × 8 completions ×
24 tokens, ≈ 8.9 kB) and takes what arrived, with the default fan-in budget (16 bundles per 10 s window)
and pushes to 8 recently seen peers.

    delivery   bundles delivered / (delivered + fetches that failed: fetch_failed, fetch_timeout,
               digest_mismatch), over every peer: the share of what fan-in selected that arrived
               (fetches still running when the peers stop are in neither)

    python -m bench.capacity [--peers 64] [--per-process 8] [--rounds 6] [--period 10]
"""

from __future__ import annotations

import argparse
import os

from bench.common import table, write_json
from bench.gossip import run_level

FAILURES = ("fetch_failed", "fetch_timeout", "digest_mismatch")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers", type=int, nargs="*", default=[64])
    ap.add_argument("--per-process", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--period", type=float, default=10.0)
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--out", default="capacity")
    args = ap.parse_args(argv)

    from swarm.bootstrap import start_bootstrap

    dht, maddrs = start_bootstrap(startup_timeout_s=180)
    rows = []
    try:
        for n in args.peers:
            print(f"{n} peers in {-(-n // args.per_process)} processes, {args.rounds} rounds × {args.period:g} s …",
                  flush=True)
            level = run_level(n, per_process=args.per_process, rounds=args.rounds, period=args.period,
                              budget=args.budget, notify=8, maddr=maddrs[0])
            failed = sum(level.get("drop_reasons", {}).get(r, 0) for r in FAILURES)
            got = level.get("fetched_pairs", 0)
            rows.append({**level, "failed": failed, "delivery": got / (got + failed) if got + failed else None,
                         "cpus": os.cpu_count()})
    finally:
        dht.shutdown()
    print(table(rows, ["peers", "processes", "delivery", "fetched_pairs", "failed", "kb_per_round", "pair_p50_s",
                       "pair_p95_s", "load_avg_1m"]))
    print(f"wrote {write_json(args.out, {'args': vars(args), 'rows': rows})}")


if __name__ == "__main__":
    main()
