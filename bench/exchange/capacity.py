"""How many real peers this machine holds: N real HivemindTransport peers at once.

Each peer is a full transport (its own p2p daemon and hivemind DHT process, one bootstrap for all) that
behaves like a node without a model, exactly as in bench/exchange/gossip.py (the same workers,
bench.harness.peers.run_level, `per_process` peers per process): every `period` seconds it publishes one
lab-round bundle (8 groups × 8 completions × 24 tokens, ≈ 8.9 kB) and takes what arrived, with the default
fan-in budget (16 bundles per 10 s window) and pushes to 8 recently seen peers.

    delivery   bundles delivered / (delivered + fetches that failed: fetch_failed, fetch_timeout,
               digest_mismatch), over every peer: the share of what fan-in selected that arrived
               (fetches still running when the peers stop are in neither)

DHT costs at each N (bench/harness/dht_probe.py): each poll read's latency and entries, reads
per peer per second, and what each peer's DHT process serves as a key holder (find requests and KiB per
second, mean and max over peers; every peer is a holder, so the mean is also a peer's DHT download),
with the exponent of each metric's growth with N fitted over the levels.

With `--transport gossip` (or `dht gossip`, each N run both ways) the peers run `swarm.gossip` (announcements
over gossipsub, DHT polls backed off while gossip delivers: swarm.exchange.poller) and the bootstrap relays the
topic (`swarm bootstrap --gossip`); each level then starts its own bootstrap, so every row's swarm is fresh.
Every row names its `transport` (`dht` or `gossip`), the peers' CPU (`cpu_cores_per_peer`: their processes, DHT
processes and p2pds, per peer, in cores), the bootstrap's (`bootstrap_cpu_cores`) and, with gossip, the
peers' gossip counters summed (`gossip`).

    python -m bench.exchange.capacity [--peers 64] [--per-process 8] [--rounds 6] [--period 10] [--beam 0 8]
                                      [--transport dht gossip]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

from bench.harness.output import results_dir, table, write_json
from bench.harness.peers import run_level

RESULTS = results_dir("exchange")

FAILURES = ("fetch_failed", "fetch_timeout", "digest_mismatch")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers", type=int, nargs="*", default=[64])
    ap.add_argument("--per-process", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--period", type=float, default=10.0)
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--beam", type=int, nargs="*", default=[0],
                    help="swarm.dht_read_beam values to run each N at (0: hivemind's default, 20)")
    ap.add_argument("--poll-interval", type=float, default=0.5, help="swarm.poll_interval_s of every peer (default 0.5)")
    ap.add_argument("--transport", nargs="*", default=["dht"], choices=["dht", "gossip"],
                    help="how announcements travel: dht (swarm.gossip off) and/or gossip (on); each N runs each")
    ap.add_argument("--gossip-poll-every", type=int, default=None,
                    help="swarm.gossip_poll_every of the gossip peers (default: the config's)")
    ap.add_argument("--gossip-fetch-spread", type=float, nargs="*", default=[None],
                    help="swarm.gossip_fetch_spread_s values of the gossip peers, one gossip row each (default: the "
                         "config's)")
    ap.add_argument("--out", default="capacity")
    args = ap.parse_args(argv)

    from bench.harness import dht_probe

    dht_probe.install()  # the bootstrap's DHT counts what it serves too
    rows = []
    levels = [(n, b, t, spread) for n in args.peers for b in args.beam for t in args.transport
              for spread in (args.gossip_fetch_spread if t == "gossip" else [None])]
    for n, beam, transport, spread in levels:
        print(f"{n} peers in {-(-n // args.per_process)} processes, read beam {beam or 'default'}, {transport}"
              f"{'' if spread is None else f' (fetch spread {spread:g} s)'}, {args.rounds} rounds × {args.period:g} s …",
              flush=True)
        rows.append(run_one(n, beam, transport == "gossip", args,
                            None if spread is None else {"gossip_fetch_spread_s": spread}))
    print(table(rows, ["peers", "transport", "dht_read_beam", "processes", "delivery", "fetched_pairs", "failed",
                       "kb_per_round", "pair_p50_s", "pair_p95_s", "cpu_cores_per_peer", "bootstrap_cpu_cores",
                       "load_avg_1m"]))
    print(table(rows, ["peers", "transport", "dht_read_beam", "read_p50_s", "read_p95_s", "reads_per_peer_s", "entries_per_read",
                       "finds_per_read", "holder_finds_per_s_mean", "holder_finds_per_s_max", "holder_kib_per_s_mean",
                       "holder_kib_per_s_max", "bootstrap_finds_per_s"]))
    for r in rows:
        if "error" in r:
            print(f"{r['peers']} peers: {r['error']}")
    fits = growth_exponents([r for r in rows if r["dht_read_beam"] == args.beam[0]
                             and r.get("transport", "dht") == args.transport[0]])
    print("growth with N (exponent b of a fit metric ∝ N^b over the levels): "
          + ", ".join(f"{k} {v:+.2f}" for k, v in fits.items()))
    print(f"wrote {write_json(args.out, {'args': vars(args), 'rows': rows, 'growth_exponents': fits}, RESULTS)}")


def run_one(n: int, beam: int, gossip: bool, args, swarm_set: dict | None = None) -> dict:
    """One level on a bootstrap of its own (relaying the level's gossip topic when `gossip`)."""
    from bench.harness import dht_probe
    from bench.harness.peers import cpu_seconds
    from swarm.dht.bootstrap import start_bootstrap

    swarm_id = f"capacity-{n}-{'gossip' if gossip else 'dht'}-{int(time.time())}"
    dht, maddrs = start_bootstrap(startup_timeout_s=180, swarm_id=swarm_id, gossip=gossip)
    try:
        before, cpu0 = dht_probe.served(dht), cpu_seconds(dht.pid)
        level = run_level(n, per_process=args.per_process, rounds=args.rounds, period=args.period,
                          budget=args.budget, notify=8, maddr=maddrs[0], beam=beam,
                          poll_interval=args.poll_interval, gossip=gossip, swarm_id=swarm_id,
                          gossip_poll_every=args.gossip_poll_every, swarm_set=swarm_set)
        after = dht_probe.served(dht)  # over the level's whole life (start-up included)
        wall = after["t"] - before["t"]
        level["bootstrap_finds_per_s"] = (after["find_requests"] - before["find_requests"]) / wall
        level["bootstrap_cpu_cores"] = (cpu_seconds(dht.pid) - cpu0) / wall  # its DHT process and p2pd
        if gossip:
            level["bootstrap_gossip_received"] = dht.gossip_relay.received
    finally:
        dht.shutdown()
    failed = sum(level.get("drop_reasons", {}).get(r, 0) for r in FAILURES)
    got = level.get("fetched_pairs", 0)
    return {**level, "failed": failed, "delivery": got / (got + failed) if got + failed else None,
            "cpus": os.cpu_count()}


GROWN = ("pair_p50_s", "pair_p95_s", "kb_per_round", "read_p50_s", "read_p95_s", "entries_per_read", "finds_per_read",
         "holder_finds_per_s_mean", "holder_finds_per_s_max", "holder_kib_per_s_mean", "holder_kib_per_s_max")


def growth_exponents(rows: list[dict]) -> dict[str, float]:
    """Least-squares slope of log(metric) on log(peers) for each metric measured at ≥ 2 levels."""
    out = {}
    for key in GROWN:
        pts = [(math.log(r["peers"]), math.log(r[key])) for r in rows if (r.get(key) or 0) > 0]
        if len({x for x, _ in pts}) >= 2:
            out[key] = round(statistics.linear_regression(*zip(*pts))[0], 3)
    return out


if __name__ == "__main__":
    main()
