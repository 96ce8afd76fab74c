"""Gossip and the DHT across hosts 20–300 ms apart: real peers in network namespaces with delayed links.

H hosts (bench.harness.netns.Hosts: network namespaces on one virtual switch, at 10.231.9.1, .2, …): one runs
the bootstrap (`python -m ops.cli bootstrap --host-maddrs /ip4/<its address>/tcp/0`, `--no-gossip` in the `dht`
arm), each of the others one worker of bench.harness.peers (`run_level`'s, with `places`: the worker runs by
`ip netns exec <host>` and its peers listen on the host's address). Every host's outgoing frames are held for a
one-way delay drawn once from [--delay-min, --delay-max] ms (seeded; ± --jitter ms), so the RTT between two
hosts is the sum of their delays: 20–300 ms with the defaults. Peers on the same host reach each other through
its loopback, undelayed. Each arm runs on the same hosts and delays:

    dht      swarm.gossip off; announcements found by polling the DHT
    gossip   swarm.gossip on (the defaults), the bootstrap relaying the topic; `--shard-peers K` sets the peers'
             swarm.gossip_shard_peers (4: 16 peers pick level 2, four announcement shards; the default 32 gives
             one shard at this size), and each row names the peers' mean level and topics at the end

Per arm: delivery (bundles delivered / (delivered + failed fetches), as bench/exchange/capacity.py), publish →
visible p50 / p95 (from a peer's publish to a bundle of it taken by another peer, over every pair: the
harness's `pair_p50_s` / `pair_p95_s`), bundles fetched, the gossip counters, the 1-minute load average, and
the RTT between the hosts measured before the arm (from every host to every other: a TCP connect answered by
a reset; min / mean / max of the per-pair means). Every process in the namespaces is killed and the
namespaces deleted at the end, on errors and on Ctrl-C too. Needs root and iproute2.

    python -m bench.exchange.latency [--hosts 8] [--per-host 2] [--rounds 6] [--period 10] [--arms dht gossip] [--shard-peers K]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from bench.harness.netns import Hosts
from bench.harness.output import results_dir, table, write_json
from bench.harness.peers import cpu_seconds, run_level

RESULTS = results_dir("exchange")
FAILURES = ("fetch_failed", "fetch_timeout", "digest_mismatch")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=8, help="hosts with peers (one more runs the bootstrap)")
    ap.add_argument("--per-host", type=int, default=2, help="peers on each host (one worker process each host)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--period", type=float, default=10.0)
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--delay-min", type=float, default=10.0, help="smallest one-way delay of a host, ms")
    ap.add_argument("--delay-max", type=float, default=150.0, help="largest one-way delay of a host, ms")
    ap.add_argument("--jitter", type=float, default=5.0, help="± ms around each host's delay (uniform)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--arms", nargs="*", default=["dht", "gossip"], choices=["dht", "gossip"])
    ap.add_argument("--shard-peers", type=int, default=None,
                    help="swarm.gossip_shard_peers of the gossip arm's peers (default: the config's, 32: one shard "
                         "at 16 peers; 4 gives level 2, four shards of about 4 peers)")
    ap.add_argument("--subnet", default="10.231.9")
    ap.add_argument("--out", default="latency")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C and kill both leave through Hosts' cleanup
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    names = ["boot", *(f"h{i}" for i in range(args.hosts))]
    rng = random.Random(args.seed)
    delays = {n: round(rng.uniform(args.delay_min, args.delay_max), 1) for n in names}
    rows = []
    with Hosts(names, subnet=args.subnet, tag=f"lat{os.getpid() % 10000}", delay_ms=delays,
               jitter_ms=args.jitter, seed=args.seed) as hosts:
        print(f"{len(names)} hosts ({hosts.delayed_by}), one-way delays ms: {delays}", flush=True)
        for arm in args.arms:
            rtt = measure_rtt(hosts)
            print(f"{arm}: RTT between hosts min / mean / max {rtt['rtt_ms']} ms; {args.hosts * args.per_host} peers"
                  f", {args.rounds} rounds × {args.period:g} s …", flush=True)
            cpu0, wall0 = switch_cpu(hosts), time.monotonic()
            row = {**run_arm(hosts, arm, args), **rtt}
            if hosts.switch_pid is not None:  # the user-space switch's CPU over the arm, in cores
                row["switch_cpu_cores"] = (switch_cpu(hosts) - cpu0) / (time.monotonic() - wall0)
            rows.append(row)
    cols = ["transport", "shard_level", "peers", "hosts", "delivery", "fetched_pairs", "failed", "p50_visible_s",
            "p95_visible_s", "rtt_ms", "load_avg_1m", "switch_cpu_cores"]
    print(table(rows, cols))
    for r in rows:
        if "error" in r:
            print(f"{r['transport']}: {r['error']}")
    payload = {"args": vars(args), "one_way_delay_ms": delays, "delayed_by": hosts.delayed_by, "rows": rows}
    print(f"wrote {write_json(args.out, payload, RESULTS)}")


def switch_cpu(hosts: Hosts) -> float:
    return cpu_seconds(hosts.switch_pid) if hosts.switch_pid is not None else 0.0


def measure_rtt(hosts: Hosts) -> dict:
    """Mean RTT of every ordered pair of hosts (4 probes each, all sources at once): min / mean / max over pairs."""
    others = {src: [d for d in hosts.names if d != src] for src in hosts.names}
    pairs: dict[tuple[str, str], float] = {}
    with ThreadPoolExecutor(len(hosts.names)) as pool:  # one prober per host, all at once
        for src, got in zip(others, pool.map(lambda s: hosts.rtt_ms(s, others[s]), others)):
            pairs.update({(src, d): statistics.fmean(xs) for d, xs in got.items() if xs})
    vals = sorted(pairs.values())
    return {"rtt_ms": [round(vals[0], 1), round(statistics.fmean(vals), 1), round(vals[-1], 1)] if vals else None,
            "rtt_pairs": len(vals)}


def run_arm(hosts: Hosts, arm: str, args) -> dict:
    """One arm: a bootstrap on `boot`, a worker of `per_host` peers on each other host, `rounds` rounds."""
    gossip = arm == "gossip"
    swarm_id = f"latency-{arm}-{int(time.time())}"
    tmp = tempfile.mkdtemp(prefix="latency-")
    with open(os.path.join(tmp, "bootstrap.log"), "w") as log:
        boot = hosts.popen("boot", [sys.executable, "-m", "ops.cli", "bootstrap", "--host-maddrs",
                                    f"/ip4/{hosts.addr['boot']}/tcp/0", "--swarm-id", swarm_id, "--startup-timeout",
                                    "180", "--gossip" if gossip else "--no-gossip"],
                           stdout=subprocess.PIPE, stderr=log, text=True)
        try:
            maddr = next((ln.strip() for ln in iter(boot.stdout.readline, "") if ln.startswith("/ip4/")), None)
            if maddr is None:
                return {"transport": arm, "error": f"the bootstrap did not start (log: {log.name})"}
            peers = [n for n in hosts.names if n != "boot"]
            places = [(hosts.command(n, []), hosts.addr[n]) for n in peers]
            swarm_set = {"gossip_shard_peers": args.shard_peers} if gossip and args.shard_peers else None
            level = run_level(len(peers) * args.per_host, per_process=args.per_host, rounds=args.rounds,
                              period=args.period, budget=args.budget, notify=8, maddr=maddr, gossip=gossip,
                              swarm_id=swarm_id, places=places, swarm_set=swarm_set)
        finally:
            boot.terminate()
            try:
                boot.wait(15)
            except subprocess.TimeoutExpired:
                boot.kill()
    failed = sum(level.get("drop_reasons", {}).get(r, 0) for r in FAILURES)
    got = level.get("fetched_pairs", 0)
    counters = level.get("gossip") or {}
    if counters.get("running"):  # the peers' mean shard level and topics at the end (-1: unsharded)
        level["shard_level"] = counters.get("level_total", 0) / counters["running"]
        level["topics_per_peer"] = counters.get("topics_total", 0) / counters["running"]
    return {**level, "hosts": len(peers), "failed": failed, "delivery": got / (got + failed) if got + failed else None,
            "p50_visible_s": level.get("pair_p50_s"), "p95_visible_s": level.get("pair_p95_s"),
            "load_avg_end": os.getloadavg()}


if __name__ == "__main__":
    main()
