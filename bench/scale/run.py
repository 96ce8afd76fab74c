"""The exchange simulated at 100 / 1,000 / 10,000 peers, running the project's own exchange code.

A discrete-event simulation on a simulated clock (bench/scale/sim.py says exactly which functions are the
project's own and what is modelled; bench/scale/model.py describes the modelled network): per-peer RTT
20–300 ms, upload 5–1,000 Mbit/s, 30 % of the peers in client mode (push only), churn with sessions of
minutes to days, clocks off by up to ±3 s, 5 % hostile peers (ghost identities that flood announcements,
junk bundles). Settings, one row each per N:

    before   the poll plan as it was before reads were paced (bench/scale/legacy.py: every key every 0.5 s
             tick, a crowded one every ⌈entries / 32⌉-th tick, at most every 16th), shards 4
    after    swarm/exchange/polling.py now: a bounded number of DHT entries read per second, shards 4
    sized    `after` with docs/PROTOCOL.md §5's sizing table: shards = N / 64 (at least 4), a
             random 4 (1,000 peers) or 8 (10,000) of them read per tick
    gossip   `sized` with swarm.gossip on: every announcement also gossiped over a modelled gossipsub mesh
             (bench/scale/mesh.py), the DHT polls gated by the real PollGate (bench/scale/gossipsim.py)
    onetopic `gossip` with publisher admission modelled: one pull of a publisher at a time, busy answers past a
             publisher's 16 strangers' streams (bench/scale/sim.py); the fan-in is whatever swarm.exchange.fanin is
             (fresh-first since issue 52)
    shards   `onetopic` on announcement shards (bench/scale/shardmesh.py: swarm.exchange.shards.ShardPlan's topics)

Every row carries `transport` ("dht", or "gossip" for the gossip setting).

Per peer per round: bytes up and down (announcements, i.e. DHT stores, reads and pushes, apart from
bundles, and the DHT answers a peer sends as a key's replica), DHT requests, the delivery ratio of what
fan-in selects, staleness at training (age, the publisher's policy versions since), publish → visible
p50 / p95 (and its two parts: publish → chosen by the fan-in, chosen → delivered); per key holder:
requests per second (the busiest, and the mean). The costs come from the real encoders and signer, the
per-RPC delay is fitted to bench/exchange/gossip.py's real 4-peer run and every real gossip row is re-run here
beside its real numbers (bench/scale/calibrate.py).

    python -m bench.scale.run [--peers 100 1000 10000] [--settings before after sized gossip] [--observers 300]
                              [--merge]   (keep the rows of the result file that this run does not redo)
                              [--costs-from scale_sim]   (that file's costs and fitted per-RPC delay, no new fit)
                              [--add NAME ...]   (rows of other result files of this bench join this run's)
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace

from bench.harness.output import results_dir, table, write_json
from bench.scale.calibrate import compare, fit_overhead, measure_costs
from bench.scale.gossipsim import simulate_gossip
from bench.scale.model import Costs, Setting
from bench.scale.report import figure
from bench.scale.sim import simulate

RESULTS = results_dir("scale")


def setting(name: str, n: int, args) -> Setting:
    base = Setting(name=name, peers=n, observers=args.observers, warmup_s=args.warmup, measure_s=args.measure,
                   seed=args.seed)
    if name == "before":
        return replace(base, plan="legacy")
    if name in ("sized", "gossip", "onetopic", "shards"):
        base = replace(base, transport="gossip") if name != "sized" else base
        if name == "onetopic":
            base = replace(base, admission=True, design=DESIGNS[name])
        if name == "shards":
            base = replace(base, admission=True, sharded=True, design=DESIGNS[name])
        shards = max(4, round(n / 64))
        return replace(base, shards=shards, read_shards=None if shards <= 4 else (4 if n <= 1000 else 8))
    return base


DESIGNS = {  # the settings of issue 52, in words (the row's `design`)
    "onetopic": "one gossip topic; fresh-first fan-in; busy answers (publisher admission 16 strangers)",
    "shards": "announcement shards (32 peers a shard, 1 extra, nested ±1 level); fresh-first fan-in; busy answers",
}


def goals(rows: list[dict], name: str) -> dict:
    """The scale goals (docs/benchmarks/scale.md §16), read off one setting's rows (100 → 10,000 peers)."""
    rs = sorted((r for r in rows if r["name"] == name), key=lambda r: r["peers"])
    if len(rs) < 2:
        return {}

    def spread(k: str) -> float:
        vals = [r[k] for r in rs]
        return max(vals) / min(vals) if min(vals) > 0 else math.inf
    at_1000 = next((r for r in rs if r["peers"] == 1000), rs[-1])
    out = {"setting": name, "peers": [r["peers"] for r in rs],
           "bytes_up_growth": rs[-1]["bytes_up_per_round"] / rs[0]["bytes_up_per_round"],
           "bytes_down_growth": rs[-1]["bytes_down_per_round"] / rs[0]["bytes_down_per_round"],
           "holder_requests_growth": rs[-1]["holder_requests_per_s"] / rs[0]["holder_requests_per_s"],
           "bytes_up_spread": spread("bytes_up_per_round"), "bytes_down_spread": spread("bytes_down_per_round"),
           "holder_requests_spread": spread("holder_requests_per_s"),
           "p95_visible_s_at_1000": at_1000["p95_visible_s"], "delivery_min": min(r["delivery"] or 0 for r in rs),
           "shards": [r["shards"] for r in rs]}
    out["traffic_flat"] = max(out["bytes_up_spread"], out["bytes_down_spread"]) <= 1.5
    out["holder_flat"] = out["holder_requests_spread"] <= 1.5
    out["p95_under_2s"] = (out["p95_visible_s_at_1000"] or math.inf) < 2.0
    out["delivery_95"] = out["delivery_min"] >= 0.95
    out["delivery_99"] = out["delivery_min"] >= 0.99
    out["no_setting_sized_to_n"] = len(set(out["shards"])) == 1
    # issue 52's goals: the busiest peer's inbound gossip flat too, p95 ≤ 1 s at 1,000 and ≤ 2 s at 10,000
    at_10000 = next((r for r in rs if r["peers"] == 10000), None)
    out["p95_visible_s_at_10000"] = at_10000["p95_visible_s"] if at_10000 else None
    out["p95_1s_at_1000"] = (out["p95_visible_s_at_1000"] or math.inf) <= 1.0
    out["p95_2s_at_10000"] = at_10000 is not None and (at_10000["p95_visible_s"] or math.inf) <= 2.0
    if all(r.get("gossip_rpcs_in_per_s_max") for r in rs):
        out["busiest_inbound_spread"] = spread("gossip_rpcs_in_per_s_max")
        out["busiest_inbound_flat"] = out["busiest_inbound_spread"] <= 1.5
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers", type=int, nargs="*", default=[100, 1000, 10000])
    ap.add_argument("--settings", nargs="*", default=["before", "after", "sized"])
    ap.add_argument("--observers", type=int, default=300, help="peers whose receive side runs in full (N above it)")
    ap.add_argument("--warmup", type=float, default=40.0)
    ap.add_argument("--measure", type=float, default=40.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-calibration", action="store_true")
    ap.add_argument("--out", default="scale_sim")
    ap.add_argument("--costs-from", default="", help="take the costs (and per-RPC delay) of this result file, no fit")
    ap.add_argument("--add", nargs="*", default=[], help="result files (names) whose rows join this run's")
    ap.add_argument("--merge", action="store_true", help="keep the file's rows (and calibration) this run does not redo")
    args = ap.parse_args(argv)

    costs = measure_costs()
    fit, calibration = {}, []
    if args.costs_from:  # the sizes and the fitted per-RPC delay of an earlier run, so that its rows compare
        costs = Costs(**json.loads((RESULTS / f"{args.costs_from}.json").read_text())["costs"])
        print(f"costs of {args.costs_from}.json: {vars(costs)}", flush=True)
    elif not args.no_calibration:
        overhead, fit = fit_overhead(costs)
        costs = replace(costs, overhead_s=overhead)
        print(f"per-RPC delay fitted to the real 4-peer push run: {overhead * 1e3:.1f} ms", flush=True)
        calibration = compare(costs)
        print(table(calibration, ["part", "peers", "real_kb_per_round", "sim_kb_per_round", "real_p50_s", "sim_p50_s",
                                  "real_p95_s", "sim_p95_s"]), flush=True)
    rows = []
    for n in args.peers:
        for name in args.settings:
            started = time.time()
            s = setting(name, n, args)
            row = (simulate_gossip if s.transport == "gossip" else simulate)(s, costs)
            row["wall_s"] = time.time() - started
            rows.append(row)
            print(f"{name} {n} peers: {row['wall_s']:.0f} s wall; down {row['bytes_down_per_round'] / 1024:.0f} KiB "
                  f"per round, holder {row['holder_requests_per_s']:.0f} req/s, p95 {row['p95_visible_s']}", flush=True)
    old = json.loads((RESULTS / f"{args.out}.json").read_text()) if args.merge else {}
    for name in args.add:  # rows of other runs of this bench (e.g. one N run apart), ahead of the file's own
        rows += [r for r in json.loads((RESULTS / f"{name}.json").read_text())["rows"]
                 if (r["name"], r["peers"]) not in {(q["name"], q["peers"]) for q in rows}]
    redone = {(r["name"], r["peers"]) for r in rows}
    rows = [{"transport": "dht", **r} for r in old.get("rows", []) if (r["name"], r["peers"]) not in redone] + rows
    rows.sort(key=lambda r: (r["peers"], ["before", "after", "sized", "gossip", "onetopic", "shards"].index(r["name"])))
    calibration, fit = calibration or old.get("calibration", []), fit or old.get("overhead_fit", {})
    cols = ["name", "transport", "peers", "shards", "bytes_up_per_round", "bytes_down_per_round", "ann_down_per_round",
            "bundle_down_per_round", "dht_requests_per_round", "holder_requests_per_s", "delivery",
            "groups_per_round", "p50_visible_s", "p95_visible_s", "age_at_train_p50_s", "version_lag_mean"]
    print(table(rows, cols))
    verdicts = {name: goals(rows, name) for name in dict.fromkeys(r["name"] for r in rows)}
    for name, g in verdicts.items():
        print(name, {k: v for k, v in g.items() if isinstance(v, bool)})
    path = write_json(args.out, {"args": vars(args), "costs": vars(costs), "overhead_fit": fit,
                                 "calibration": calibration, "goals": verdicts, "rows": rows}, RESULTS)
    figure(rows, RESULTS / f"{args.out}.png")
    print(f"wrote {path} and {args.out}.png")


if __name__ == "__main__":
    main()
