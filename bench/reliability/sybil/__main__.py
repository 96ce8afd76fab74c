"""Sybil-bounded work (docs/benchmarks/reliability.md §14): what many throwaway identities cost a node.

Real hivemind peers on 127.0.0.1, no model. Two arms, each on a fresh bootstrap peer and a fresh victim:

  honest   10 honest peers (real HivemindTransports in one process; each publishes a bundle of
           8 groups × 8 completions × 24 tokens every 5 s, at its own offset)
  sybil    the same 10 honest peers, plus --sybils (default 1000) throwaway identities announcing
           one bundle each every window from one process: one DHT peer that signs with all their
           keys. Their bytes are never served: half of them name a closed port, half a tarpit that
           accepts TCP connections and never answers (such a fetch holds a download slot until
           the fetch timeout).

The victim is a HivemindTransport with the default limits in its own process. Once a window it
publishes a bundle of its own (so peers that have seen it push their announcements to it, as to a
node), takes what arrived and judges it as a node's ingest would (the honest peers' records used,
via Transport.judge). Per window of wall time it logs: fetches started to honest peers and to
sybils, honest groups delivered, announcement entries it read and vetted, poll ticks, the CPU
seconds of its own process, of its DHT process and of its p2pd, their RSS, and the sizes of its
books (peers tracked, standing entries, candidates, vetted values). The --warmup windows run with
the established honest peers alone (the victim learns whose records it uses); then the sybils
start and one more honest peer joins (a newcomer under the flood: when is it first fetched?), and
the --windows measured windows follow.

    python -m bench.reliability.sybil [--sybils 1000] [--honest 10] [--windows 6] [--warmup 2]

The processes are bench/reliability/sybil/roles.py.

Keys of the throwaway identities are cached in $SWARM_CACHE_DIR/bench/sybil-keys.bin (≈ 40 ms each
to generate, 2 min for 1000 on this machine the first time).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.harness.identities import cache_dir
from bench.harness.output import results_dir, table, write_json
from bench.reliability.sybil.roles import PERIOD_S, WINDOW_S, B, G, T

RESULTS = results_dir("reliability")


def _spawn(role: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bench.reliability.sybil.roles", role, *extra], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def _ready(proc: subprocess.Popen, what: str) -> dict:
    for line in proc.stdout:
        obj = json.loads(line)
        if "ready" in obj:
            return obj
    raise RuntimeError(f"{what} exited before it was ready")


def _tell(proc: subprocess.Popen, word: str) -> None:
    proc.stdin.write(word + "\n")
    proc.stdin.flush()


def run_arm(name: str, n_honest: int, n_sybils: int, windows: int, warmup: int, tmp: Path) -> dict:
    """Warm-up windows with the established honest peers alone (the victim learns whom it uses), then the
    sybils (if any) start and one more honest peer joins (a newcomer under the flood), then the measured
    windows."""
    from swarm.dht.bootstrap import start_bootstrap

    boot, maddrs = start_bootstrap(startup_timeout_s=180)
    swarm_id = f"sybil-{name}-{int(time.time())}"
    common = ["--initial-peer", maddrs[0], "--swarm-id", swarm_id]
    procs = []
    try:
        procs.append(_spawn("honest", "--n", str(n_honest + 1), "--late", "1", *common))
        hon = procs[-1]
        ids = _ready(hon, "the honest peers")["ready"]
        (tmp / f"{name}-honest.json").write_text(json.dumps(ids))
        procs.append(_spawn("victim", "--honest-ids", str(tmp / f"{name}-honest.json"), "--late", "1",
                            "--windows", str(windows + warmup), *common))
        vict = procs[-1]
        _ready(vict, "the victim")
        syb = None
        if n_sybils:
            procs.append(syb := _spawn("sybils", "--n", str(n_sybils), *common))
            print(f"  {n_sybils} identities ready after {_ready(syb, 'the sybils')['ready']:.0f} s", flush=True)
        _tell(vict, "go")
        rows = [json.loads(vict.stdout.readline()) for _ in range(warmup)]
        _tell(hon, "late")
        if syb is not None:
            _tell(syb, "go")
        rows += [json.loads(line) for line in vict.stdout]
        vict.wait(60)
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    p.stdin.write("stop\n")
                    p.stdin.flush()
                except (BrokenPipeError, ValueError):
                    pass
        for p in procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
        boot.shutdown()
    measured = rows[warmup:]
    late = [r["fetch_late"] for r in measured]
    summary = summarize(measured)
    summary["newcomer_first_fetch_window"] = next((i for i, n in enumerate(late) if n), None)
    summary["newcomer_groups"] = sum(r["late_groups"] for r in measured)
    return {"arm": name, "honest_peers": n_honest, "newcomers": 1, "sybils": n_sybils, "warmup": rows[:warmup],
            "windows": measured, "summary": summary}


def summarize(rows: list[dict]) -> dict:
    def med(k):
        return statistics.median(r.get(k, 0) for r in rows)

    def top(k):
        return max(r.get(k, 0) for r in rows)
    out = {k: med(k) for k in ("fetch_honest", "fetch_sybil", "honest_groups", "entries_read", "ticks",
                               "cpu_node", "cpu_dht", "cpu_p2pd")}
    out.update({f"{k}_max": top(k) for k in ("fetch_sybil", "entries_read", "cpu_node", "cpu_dht", "peers_tracked",
                                             "standing_entries", "candidates", "vetted")})
    out["fetches_max"] = max(r["fetch_honest"] + r["fetch_sybil"] for r in rows)
    for k in ("rss_node_mb", "rss_dht_mb", "rss_p2pd_mb"):
        out[k] = [rows[0].get(k), rows[-1].get(k)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sybils", type=int, default=1000)
    ap.add_argument("--honest", type=int, default=10)
    ap.add_argument("--windows", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--out", default="sybil")
    args = ap.parse_args()

    tmp = cache_dir() / "sybil-run"
    tmp.mkdir(parents=True, exist_ok=True)
    arms = []
    for name, n_sybils in (("honest", 0), ("sybil", args.sybils)):
        print(f"arm {name}: {args.honest} honest peers, {n_sybils} throwaway identities", flush=True)
        arms.append(run_arm(name, args.honest, n_sybils, args.windows, args.warmup, tmp))
    cols = ["arm", "fetch_honest", "fetch_sybil", "fetches_max", "honest_groups", "entries_read", "ticks",
            "cpu_node", "cpu_dht", "cpu_p2pd", "peers_tracked_max", "candidates_max", "vetted_max",
            "newcomer_first_fetch_window", "newcomer_groups"]
    print("per window (10 s), median over the measured windows (…_max: the largest)")
    print(table([{"arm": a["arm"], **a["summary"]} for a in arms], cols))
    for a in arms:
        print(f"{a['arm']}: RSS first → last measured window (MB): "
              + ", ".join(f"{k[4:-3]} {v[0]} → {v[1]}" for k, v in a["summary"].items() if k.startswith("rss_")))
    path = write_json(args.out, {"window_s": WINDOW_S, "arms": arms,
                                 "honest_publish_period_s": PERIOD_S, "bundle": {"groups": B, "completions": G,
                                                                                  "tokens": T}}, RESULTS)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
