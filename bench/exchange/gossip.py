"""The exchange by swarm time on real hivemind peers (127.0.0.1, no model): fan-in and latency.

Each simulated peer is a real `HivemindTransport` (its own p2p daemon and DHT process) that
behaves like a node without a model: every `period` seconds (a shared clock, with a random
offset per peer so they do not publish in lockstep) it publishes one bundle shaped like a lab
round (B prompts × G completions × T tokens with ids, f16 logprobs and text) and takes what has
arrived, as `run_round` does. `time.monotonic()` is system-wide on Linux, so publish and arrival
times from different processes compare directly.

    bytes / round       bundle bytes one peer downloaded per round (Delivery.bytes)
    publish → visible   seconds from the publisher calling `publish` until a receiver's transport
                        has fetched, verified and decoded the bundle (it is then in `take`)
    per pair            p50 / p95 over every (publisher, receiver, bundle) that was fetched

Parts, printed side by side:

  fan-in    --fanin-nodes 4 8 16: bytes per node per round with the default bounded fan-in
            (--budget bundles per 10 s window) against fetch-all (an unbounded budget)
  latency   --latency-nodes 4 8: publish → visible with direct pushes (notify_peers 8, the
            default) and with the DHT poll alone (notify_peers 0)

    python -m bench.exchange.gossip [--fanin-nodes 4 8 16] [--latency-nodes 4 8] [--rounds 8] [--period 5]
"""

from __future__ import annotations

import argparse

from bench.harness.output import results_dir, table, write_json
from bench.harness.peers import run_level

RESULTS = results_dir("exchange")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fanin-nodes", type=int, nargs="*", default=[4, 8, 16])
    ap.add_argument("--latency-nodes", type=int, nargs="*", default=[4, 8])
    ap.add_argument("--per-process", type=int, default=4, help="simulated peers per process above 8 peers")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--period", type=float, default=5.0, help="seconds per round")
    ap.add_argument("--budget", type=int, default=4, help="fan-in: bundles per 10 s window (swarm default 16)")
    ap.add_argument("--tag", default="", help="suffix of the results file")
    args = ap.parse_args(argv)

    from swarm.dht.bootstrap import start_bootstrap

    dht, maddrs = start_bootstrap(startup_timeout_s=120)
    rows = []
    try:
        for n in args.fanin_nodes:
            for budget, label in ((args.budget, "fan-in"), (100_000, "fetch-all")):
                print(f"{label}: {n} peers, {args.rounds} rounds × {args.period:g} s …", flush=True)
                rows.append({"part": label, **run_level(n, per_process=1 if n <= 8 else args.per_process,
                                                        rounds=args.rounds, period=args.period, budget=budget,
                                                        notify=8, maddr=maddrs[0])})
        for n in args.latency_nodes:
            for notify, label in ((8, "latency, push"), (0, "latency, DHT poll only")):
                print(f"{label}: {n} peers …", flush=True)
                rows.append({"part": label, **run_level(n, per_process=1, rounds=args.rounds, period=args.period,
                                                        budget=100_000, notify=notify, maddr=maddrs[0])})
    finally:
        dht.shutdown()
    cols = ["part", "peers", "processes", "budget", "notify", "kb_per_round", "records_per_round", "pair_p50_s",
            "pair_p95_s", "fetched_pairs", "skipped", "load_avg_1m"]
    print(table(rows, cols))
    for r in rows:
        if "error" in r:
            print(f"{r['part']} {r['peers']} peers: {r['error']}")
        elif r["drop_reasons"]:
            print(f"{r['part']} {r['peers']} peers, drops: {r['drop_reasons']}")
    write_json(f"gossip{args.tag}", {"args": vars(args), "rows": rows}, RESULTS)


if __name__ == "__main__":
    main()
