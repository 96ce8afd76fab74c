"""What a node's DHT child keeps over time: real hivemind peers on 127.0.0.1, no model (docs/benchmarks/reliability.md §15I).

In the soak hour (§15A, §15D, §15F) a lab node's DHT child (hivemind's DHT process, a fork of the node that
swarm/dht/peer.py starts) rose by ≈ 30–40 MiB over the first half hour and then stayed level. This bench runs the
soak's exchange without its models to see what that child holds while it rises:

    python -m bench.reliability.dht_memory --minutes 40              # ≈ 41 min
    python -m bench.reliability.dht_memory --minutes 4 --name dht_memory_trial

A `swarm bootstrap` (as the soak starts it) and --peers peers, each its own process as a lab node is: a
HivemindTransport of the default config that publishes one bundle of synthetic lab records every --period-s
seconds (the soak's lab rounds: 1.1–1.4 s) and takes what arrived, as a round does. With --ghosts N, from
--ghosts-from to --ghosts-until minutes, a peer announces N throwaway identities' bundles every window (the
soak's dialer: 32 identities, their addresses a port nobody serves): signed entries every DHT peer near their key
stores as a replica until they expire. Peer --heavy imports torch and transformers before its DHT starts, so its
DHT child is a fork of a parent of a lab node's size, as in the soak; peer --trace runs tracemalloc in its DHT
child.

Sampled every --sample-s seconds from /proc, for every process: VmRSS, RssAnon, RssFile and Private (smaps_rollup),
by part (main, DHT child, p2pd, torch_shm_manager: the soak's "child" counted the last with the DHT child). Every --probe-s seconds each peer asks its own DHT child
(bench.harness.dht_probe.child_memory): its storage and cache (keys, entries, value bytes, heap entries), routing
table, pending searches and cache refreshes, asyncio tasks, Python objects, pymalloc's arenas (now and most ever)
and the bytes in its blocks, glibc's heap (arena, in use, free, mmapped), and, where traced, the source lines whose
allocations grew. Results: bench/results/reliability/<name>.json (a sample every 30 s; every probe).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections import Counter
from functools import partial
from pathlib import Path

from bench.harness.output import results_dir, write_json

ROOT = Path(__file__).resolve().parents[2]
SWARM_ID = "dht-memory"
_MADDR = re.compile(r"^(/ip4/\S+/p2p/\S+)$", re.M)
RECORDS = 4  # groups a lab node publishes per round (examples/lab-swarm.yaml: prompts_per_round 4)


# ---------------------------------------------------------------- the peers' processes

def peer(args) -> None:
    """One peer: publish and take every --period-s, print its DHT child's probe as a JSON line every --probe-s."""
    if args.heavy:  # a parent of a lab node's size: the DHT child is its fork
        import torch
        import transformers  # noqa: F401

        torch.nn.Linear(2048, 2048)  # some of torch's allocator in use, as a node's would be
    if args.trace:
        import tracemalloc

        from swarm.dht import peer as dht_peer
        run = dht_peer.QuietOrphanDHT.run

        def traced(self, _run=run):
            tracemalloc.start(args.trace_frames)
            _run(self)

        dht_peer.QuietOrphanDHT.run = traced
    from bench.harness.dht_probe import child_memory
    from bench.harness.peers import synthetic_records
    from swarm.config import SwarmConfig
    from swarm.exchange.hivemind import HivemindTransport

    stop = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.append(1))
    t = HivemindTransport(cfg=SwarmConfig(enabled=True, swarm_id=SWARM_ID, initial_peers=[args.initial_peer],
                                          identity_path=args.identity, startup_timeout_s=180))
    print(json.dumps({"ready": t.peer_id}), flush=True)
    rng = random.Random(args.identity)

    async def probe():
        return await t.dht.run_coroutine(partial(child_memory, top=args.top), return_future=True)

    next_probe, r, took, modes, skipped = time.monotonic(), 0, 0, Counter(), 0
    while not stop:
        started = time.monotonic()
        t.publish(synthetic_records(t.peer_id, r, rng, SWARM_ID)[:RECORDS])
        got = t.take()
        took += len(got.records)
        modes[got.announce.get("mode", "dht")] += 1  # how this peer read the DHT (swarm.exchange.poller)
        skipped += got.announce.get("dht_polls_skipped", 0)
        if started >= next_probe:
            try:
                stats = t.run_on_loop(probe(), 120)
                print(json.dumps({"probe": stats, "round": r, "records_taken": took, "poll_modes": dict(modes),
                                  "dht_polls_skipped": skipped}), flush=True)
            except Exception as exc:  # a probe that fails is said, and the peer goes on
                print(json.dumps({"probe_failed": repr(exc)[:200]}), flush=True)
            next_probe += args.probe_s
        r += 1
        time.sleep(max(0.0, started + args.period_s - time.monotonic()))
    t.shutdown()


def ghosts(args) -> None:
    """--ghosts throwaway identities behind one DHT peer, announcing a bundle each per window (the soak's dialer)."""
    from bench.harness.attacks import Ghosts

    stop = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.append(1))
    tarpit = socket.socket()
    tarpit.bind(("127.0.0.1", 0))
    tarpit.listen(64)  # never accepted: a dial to it hangs until the dialler's timeout
    g = Ghosts(args.ghosts, args.initial_peer, addrs=f"/ip4/127.0.0.1/tcp/{tarpit.getsockname()[1]}")
    print(json.dumps({"ready": len(g.ids)}), flush=True)
    while not stop:
        print(json.dumps({"stored": g.announce(SWARM_ID, 4)}), flush=True)
        for _ in range(100):
            if stop:
                break
            time.sleep(0.1)
    g.shutdown()


# ---------------------------------------------------------------- sampling /proc

def _status(pid: int) -> dict:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("Name", "VmRSS", "RssAnon", "RssFile"):
            out[name] = rest.strip() if name == "Name" else int(rest.split()[0]) / 1024
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        out["Private"] = sum(int(m) for m in re.findall(r"^Private_(?:Clean|Dirty):\s+(\d+)", rollup, re.M)) / 1024
    except OSError:
        out["Private"] = 0.0
    return out


def sample_tree(pid: int) -> dict | None:
    """MiB by part (main, child: the DHT process, p2pd, shm: torch's torch_shm_manager) and field (VmRSS, RssAnon, RssFile, Private); None if gone."""
    parts: dict = {}
    stack, seen = [pid], set()
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            st = _status(p)
            for task in Path(f"/proc/{p}/task").iterdir():
                stack += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError, ValueError):
            if p == pid:
                return None
            continue
        name = st["Name"]
        part = "main" if p == pid else "p2pd" if name.startswith("p2pd") else "shm" if name.startswith("torch_shm") else "child"
        into = parts.setdefault(part, {k: 0.0 for k in ("VmRSS", "RssAnon", "RssFile", "Private")})
        for k in into:
            into[k] += st.get(k, 0.0)
    return {part: {k: round(v, 2) for k, v in f.items()} for part, f in parts.items()}


# ---------------------------------------------------------------- the orchestrator

class Proc:
    def __init__(self, name: str, cmd: list[str], log: Path):
        self.name, self.log = name, log
        self.proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=ROOT,
                                     start_new_session=True, env={**os.environ, "PYTHONPATH": str(ROOT)})

    def lines(self) -> list[dict]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
        return out

    def stop(self, wait_s: float = 60.0) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(wait_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def _wait(until, what: str, timeout_s: float = 300.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = until()
        if got:
            return got
        time.sleep(0.5)
    raise SystemExit(f"dht_memory: {what} not ready in {timeout_s:.0f} s")


def run(args) -> dict:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    me = [sys.executable, "-m", "bench.reliability.dht_memory"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs: dict[str, Proc] = {}
    procs["bootstrap"] = Proc("bootstrap", [sys.executable, "-m", "ops.cli", "bootstrap", "--host-maddrs",
                                            f"/ip4/127.0.0.1/tcp/{port}", "--identity", str(out / "bootstrap.key"),
                                            "--swarm-id", SWARM_ID], out / "bootstrap.log")
    try:
        maddr = _wait(lambda: (m := _MADDR.search(procs["bootstrap"].log.read_text(errors="replace"))) and m.group(1),
                      "the bootstrap")
        for i in range(args.peers):
            name = f"peer-{i}"
            procs[name] = Proc(name, me + ["--role", "peer", "--initial-peer", maddr, "--identity", str(out / f"{name}.key"),
                                           "--period-s", str(args.period_s), "--probe-s", str(args.probe_s),
                                           "--top", str(args.top), "--trace-frames", str(args.trace_frames)]
                               + (["--as-heavy"] if i == args.heavy else []) + (["--as-traced"] if i == args.trace else []),
                               out / f"{name}.log")
        for i in range(args.peers):
            _wait(lambda: any("ready" in x for x in procs[f"peer-{i}"].lines()), f"peer-{i}")
        print(f"dht_memory: bootstrap and {args.peers} peers up; {args.minutes:g} min from now", flush=True)
        t0 = time.monotonic()
        samples, ghost_window = [], (args.ghosts_from * 60, args.ghosts_until * 60)
        next_sample = t0
        while (now := time.monotonic()) - t0 < args.minutes * 60:
            el = now - t0
            if args.ghosts and "ghosts" not in procs and ghost_window[0] <= el < ghost_window[1]:
                procs["ghosts"] = Proc("ghosts", me + ["--role", "ghosts", "--initial-peer", maddr, "--ghosts",
                                                       str(args.ghosts)], out / "ghosts.log")
                print(f"dht_memory: {el / 60:.1f} min: {args.ghosts} ghosts start", flush=True)
            if "ghosts" in procs and procs["ghosts"].proc.poll() is None and el >= ghost_window[1]:
                procs["ghosts"].stop()
                print(f"dht_memory: {el / 60:.1f} min: the ghosts leave", flush=True)
            row = {"t_s": round(el, 1)}
            for name, p in procs.items():
                if p.proc.poll() is None and (tree := sample_tree(p.proc.pid)) is not None:
                    row[name] = tree
            samples.append(row)
            if len(samples) % max(1, int(300 / args.sample_s)) == 0:
                child = row.get("peer-0", {}).get("child", {}).get("VmRSS")
                print(f"dht_memory: {el / 60:.1f} min: peer-0's DHT child {child} MiB", flush=True)
            next_sample += args.sample_s
            time.sleep(max(0.0, next_sample - time.monotonic()))
        dead = [n for n, p in procs.items() if p.proc.poll() is not None and n != "ghosts"]
    finally:
        for p in reversed(list(procs.values())):
            p.stop()
    probes = {name: [{"t_s": round(x["probe"]["t"] - t0, 1), **x} for x in p.lines() if "probe" in x]
              for name, p in procs.items() if name.startswith("peer-")}
    for rows in probes.values():
        for x in rows:
            x["probe"].pop("t", None)
    return {"args": vars(args), "code": _code(), "died_early": dead, "samples": samples, "probes": probes}


def _code() -> str:
    """The commit the run's code is at, and whether the worktree had changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                               text=True).stdout
        return head.strip() + (" (with uncommitted changes)" if dirty.strip() else "")
    except OSError:
        return "unknown"


# ---------------------------------------------------------------- the report

MARKS_MIN = (2, 5, 10, 15, 20, 25, 30, 35, 40, 50, 60)


def _at(samples: list[dict], name: str, part: str, field: str, minute: float) -> float | None:
    """The median of `field` over the minute ending at `minute` (None where there is no sample)."""
    xs = [s[name][part][field] for s in samples
          if name in s and part in s[name] and minute * 60 - 60 <= s["t_s"] <= minute * 60]
    return round(statistics.median(xs), 1) if xs else None


def _probe_at(rows: list[dict], minute: float) -> dict | None:
    before = [x for x in rows if x["t_s"] <= minute * 60 + 1]
    return before[-1]["probe"] if before else None


def summarise(res: dict) -> dict:
    samples, minutes = res["samples"], res["args"]["minutes"]
    marks = [m for m in MARKS_MIN if m <= minutes] + ([minutes] if minutes not in MARKS_MIN else [])
    rss = {}
    for name in [k for k in samples[-1] if k != "t_s"] if samples else []:
        rss[name] = {part: {field: {str(m): _at(samples, name, part, field, m) for m in marks}
                            for field in ("VmRSS", "RssAnon", "RssFile", "Private")}
                     for part in ("main", "child", "p2pd", "shm")}
    kept = {}
    for name, rows in res["probes"].items():
        kept[name] = {}
        for m in marks:
            p = _probe_at(rows, m)
            if p is None:
                continue
            kept[name][str(m)] = {
                "storage_entries": p["storage"]["entries"], "storage_kib": round(p["storage"]["bytes"] / 1024, 1),
                "storage_heap": p["storage"]["heap"], "cache_entries": p["cache"]["entries"],
                "cache_kib": round(p["cache"]["bytes"] / 1024, 1), "routing_peers": p["routing_peers"],
                "pending_gets": p["pending_gets"], "pending_get_keys": p.get("pending_get_keys"),
                "blacklist": p.get("blacklist"), "tasks": p["tasks"], "gc_objects": p["gc_objects"],
                "pymalloc_arenas_mib": p["pymalloc"].get("arenas_mib"),
                "pymalloc_peak_mib": p["pymalloc"].get("arenas_peak_mib"),
                "pymalloc_blocks_mib": round(p["pymalloc"].get("blocks_mib", 0), 2),
                "malloc_arena_mib": round(p["malloc"].get("arena", 0), 2),
                "malloc_in_use_mib": round(p["malloc"].get("in_use", 0), 2),
                "malloc_mmapped_mib": round(p["malloc"].get("mmapped", 0), 2),
                "threads": p["status"].get("Threads"), "calls_filed": p.get("calls_filed"),
                "holdings": p.get("holdings"), "leaks": p.get("leaks"), **({"traced_mib": round(p["traced_mib"], 2)}
                                                          if "traced_mib" in p else {})}
        if rows and "grown" in rows[-1]["probe"]:
            kept[name]["grown_since_first_probe"] = rows[-1]["probe"]["grown"]
    return {"rss_mib_median_of_minute": rss, "child_keeps": kept}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=40.0)
    ap.add_argument("--peers", type=int, default=4)
    ap.add_argument("--period-s", type=float, default=1.2, help="seconds between a peer's publishes (a lab round)")
    ap.add_argument("--sample-s", type=float, default=5.0)
    ap.add_argument("--probe-s", type=float, default=60.0)
    ap.add_argument("--ghosts", type=int, default=0, help="throwaway identities announcing each window (soak: 32)")
    ap.add_argument("--ghosts-from", type=float, default=0.0, help="minute the ghosts start")
    ap.add_argument("--ghosts-until", type=float, default=1e9, help="minute they leave")
    ap.add_argument("--heavy", type=int, default=0, help="the peer whose parent imports torch (-1: none)")
    ap.add_argument("--trace", type=int, default=1, help="the peer whose DHT child runs tracemalloc (-1: none)")
    ap.add_argument("--trace-frames", type=int, default=6)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--name", default="dht_memory")
    ap.add_argument("--out", default=None, help="run directory for logs and keys (default runs/<name>)")
    # a peer's own process (started by the orchestrator)
    ap.add_argument("--role", choices=["peer", "ghosts"], default=None, help=argparse.SUPPRESS)
    ap.add_argument("--initial-peer", help=argparse.SUPPRESS)
    ap.add_argument("--identity", help=argparse.SUPPRESS)
    ap.add_argument("--as-heavy", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--as-traced", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.role is not None:
        args.heavy, args.trace = args.as_heavy, args.as_traced
        (peer if args.role == "peer" else ghosts)(args)
        return
    args.out = args.out or str(ROOT / "runs" / args.name)
    for sig in (signal.SIGINT, signal.SIGTERM):  # under nohup … & SIGINT is ignored: both stop the run in order
        signal.signal(sig, signal.default_int_handler)
    res = run(args)
    res["summary"] = summarise(res)
    res["samples"] = [s for i, s in enumerate(res["samples"]) if i % max(1, int(30 / args.sample_s)) == 0]
    path = write_json(args.name, res, results_dir("reliability"))
    s = res["summary"]["rss_mib_median_of_minute"]
    for name in sorted(s):
        for part in ("main", "child", "p2pd"):
            row = s[name][part]["VmRSS"]
            print(f"{name:>10} {part:>6} VmRSS " + "  ".join(f"{m}′ {v}" for m, v in row.items()), flush=True)
    print(f"dht_memory: wrote {path}", flush=True)


if __name__ == "__main__":
    main()
