"""A crowded shard: does a peer's bundle reach a node when throwaway identities fill its announcement key?

    python -m bench.exchange.crowded_shard [--bundles 12] [--period-s 2.5] [--repeats 1] [--arms 40:push,…] [--name crowded_shard]

Real hivemind peers on 127.0.0.1: a bootstrap, a node `victim` and an honest peer `honest`, each publishing a
bundle every --period-s and taking (and judging as used) what the other sends, as two nodes would; and, per
arm, G throwaway identities behind one DHT peer, all in the honest peer's shard, announcing every window
bundles nobody serves (bench.harness.attacks.Ghosts). After a warm-up in which the two peers find each other, the
honest peer publishes --bundles bundles; the bench counts how many reached the victim and how long after
their publication (delay). Arms:

    G 0 / 40 / 400         identities crowding the honest peer's shard (0: the control)
    dht-only | push        the honest peer announces through the DHT alone (swarm.notify_peers 0) or also
                           pushes each announcement to the peers it knows (the default, docs/PROTOCOL.md §6.2)
    random                 (G 40, dht-only) the victim's reads keep a random subset of a crowded key's entries,
                           as before swarm.dht.entries.pick_entries, instead of its peers in good standing first

Reads of a crowded key are paced by the entries under it (swarm.exchange.polling: a key of n entries is read about
every n × 4 × 1.25 / 12.8 s), so a peer announcing through the DHT alone is seen late and loses bundles
(a newer announcement replaces its older one). Writes bench/results/exchange/<name>.json.
"""

from __future__ import annotations

import argparse
import random
import statistics
import threading
import time

from bench.harness.attacks import Ghosts
from bench.harness.output import machine, results_dir, table, write_json
from bench.harness.peers import synthetic_records
from swarm.config import SwarmConfig
from swarm.dht.bootstrap import start_bootstrap
from swarm.exchange.hivemind import HivemindTransport
from swarm.exchange.standing import Standing

RESULTS = results_dir("exchange")

ARMS = [(0, "dht-only"), (40, "dht-only"), (40, "random"), (40, "push"), (400, "dht-only"), (400, "push")]
WARMUP_S = 15.0


def _peer(boot: list[str], swarm_id: str, notify: int) -> HivemindTransport:
    return HivemindTransport(cfg=SwarmConfig(enabled=True, swarm_id=swarm_id, initial_peers=boot[:1],
                                             startup_timeout_s=120, dht_timeout_s=10, notify_peers=notify,
                                             poll_interval_s=0.5, fetch_timeout_s=10))


class _Exchange(threading.Thread):
    """`me` takes every 0.2 s what arrived and judges each sender's records as used (a node's verdict)."""

    def __init__(self, me: HivemindTransport):
        super().__init__(daemon=True)
        self.me, self.stop, self.arrived = me, threading.Event(), {}  # (peer, round) → when it arrived

    def run(self) -> None:
        while not self.stop.wait(0.2):
            got = self.me.take()
            now = time.time()
            for rec in got.records:
                self.arrived.setdefault((rec.peer, rec.round), now)
            if got.records:
                self.me.judge({p: (sum(r.peer == p for r in got.records), 0) for p in {r.peer for r in got.records}})


def run_arm(boot: list[str], ghosts_n: int, mode: str, bundles: int, period_s: float, seed: int) -> dict:
    swarm_id = f"crowd-{ghosts_n}-{mode}-{seed}"
    rng = random.Random(seed)
    saved = Standing.read_order
    if mode == "random":  # the victim's (and everyone's in this process) reads as before: a random subset
        Standing.read_order = lambda self, now, limit=64: ([], [])
    victim = _peer(boot, swarm_id, 8)
    honest = _peer(boot, swarm_id, 0 if mode in ("dht-only", "random") else 8)
    ghosts = Ghosts(ghosts_n, boot[0], addrs="", near=honest.peer_id) if ghosts_n else None
    ex_v, ex_h = _Exchange(victim), _Exchange(honest)
    ex_v.start(), ex_h.start()
    published: dict[int, float] = {}
    stop = threading.Event()

    def crowd() -> None:
        while ghosts and not stop.is_set():
            ghosts.announce(swarm_id, shards=4)
            stop.wait(10.0)
    threading.Thread(target=crowd, daemon=True).start()
    try:
        t0, r = time.time(), 0
        while time.time() - t0 < WARMUP_S + bundles * period_s:
            r += 1
            victim.publish(synthetic_records(victim.peer_id, r, rng, swarm_id))
            if time.time() - t0 >= WARMUP_S and len(published) < bundles:
                published[r] = time.time()  # a measured bundle
            honest.publish(synthetic_records(honest.peer_id, r, rng, swarm_id))
            time.sleep(period_s)
        time.sleep(20.0)  # late arrivals
    finally:
        stop.set()
        ex_v.stop.set(), ex_h.stop.set()
        Standing.read_order = saved
        for t in (victim, honest):
            t.shutdown()
        if ghosts:
            ghosts.shutdown()
    delays = [ex_v.arrived[(honest.peer_id, r)] - at for r, at in published.items() if (honest.peer_id, r) in ex_v.arrived]
    warm = sum(1 for (p, r) in ex_v.arrived if p == honest.peer_id and r not in published)
    missed = [i for i, r in enumerate(published) if (honest.peer_id, r) not in ex_v.arrived]
    return {"ghosts": ghosts_n, "mode": mode, "seed": seed, "bundles": len(published), "delivered": len(delays),
            "missed": missed,
            "delay_p50_s": round(statistics.median(delays), 2) if delays else None,
            "delay_max_s": round(max(delays), 2) if delays else None, "warmup_delivered": warm,
            "victim_got_from_honest_total": warm + len(delays)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundles", type=int, default=12)
    ap.add_argument("--period-s", type=float, default=2.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default="crowded_shard")
    ap.add_argument("--arms", default=None, help="comma-separated GHOSTS:MODE (default: all six)")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each arm (seed, seed + 1, …)")
    args = ap.parse_args(argv)
    arms = ARMS if args.arms is None else [(int(a.split(":")[0]), a.split(":")[1]) for a in args.arms.split(",")]
    dht, boot = start_bootstrap(startup_timeout_s=120)
    rows = []
    try:
        runs = [(g, mode, args.seed + k) for k in range(args.repeats) for g, mode in arms]
        for i, (g, mode, seed) in enumerate(runs):
            print(f"[crowded_shard] run {i + 1}/{len(runs)}: {g} identities, {mode}, seed {seed}", flush=True)
            rows.append(run_arm(boot, g, mode, args.bundles, args.period_s, seed))
            print(table(rows[-1:], list(rows[-1])), flush=True)
    finally:
        dht.shutdown()
    print(table(rows, list(rows[0])))
    print(f"wrote {write_json(args.name, {'bench': args.name, 'machine': machine(), 'args': vars(args), 'arms': rows}, RESULTS)}")


if __name__ == "__main__":
    main()
