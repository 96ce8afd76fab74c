"""Soak (docs/benchmarks/reliability.md §15): an hour of kills, restarts and hostile peers.

Real processes on 127.0.0.1, all pinned to CPU core 0 (with every process they start): a
`swarm bootstrap` (fixed port and identity, so a restart comes back at the same address) and
--nodes `swarm node` processes of examples/lab-swarm.yaml (checkpoint every round, no eval). Once every
node has finished a round the clock starts:

  quiet      the first --quiet-minutes (default: a sixth of --minutes): the nodes alone
  disturbed  the rest: every --kill-every-s one of lab-1 … lab-N-1 that has finished a round since its
             start, drawn at random, is killed -9 (its main process, as the OOM killer would) and
             restarted 10 s later; lab-0 is never killed, so one node's RSS is followed for the whole run.
             The bootstrap is killed -9 once (back after 30 s). Three ghosts announce a bundle and leave;
             a garbage sender joins and leaves twice; a slow peer joins and leaves twice (SIGINT; it
             resumes from its checkpoint). The slow peer is a lab node whose main process the harness
             lets run 10 % of each second (SIGSTOP / SIGCONT) once it has finished a round: a machine
             ≈ 10× slower that takes no more of the shared core than that (nice would not do: each process
             here is its own session, and the kernel's autogroups make nice moot across sessions).
With --attackers the disturbed phase also has the exhaustion attackers of bench/reliability/soak/roles.py (a decode
bomber, a relay pushing honest records under its own id ten times a second, a staller, a leech, a dialer
with 32 ghosts naming a tarpit, an unsigned-entry flooder, a name bloater: docs/benchmarks/reliability.md §15B), from
a tenth to 95 % of it, on CPU core 1 — other machines, as attackers are. A node, the bootstrap or the
garbage sender that exits on its own is restarted 10 s later, as a
supervisor would; the report counts it. RSS (main process + DHT child + p2pd, from /proc, each part and the total) is
sampled every 5 s; round times, starts and drops come from each node's metrics.jsonl; tracebacks are counted
in every log (the report: bench/reliability/soak/report.py).

    python -m bench.reliability.soak [--minutes 60] [--out runs/soak] [--nodes 4] [--seed 0] [--attackers]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import sys
import time
from pathlib import Path

import yaml

from bench.reliability.soak.processes import (
    ROOT,
    Role,
    Throttle,
    free_port,
    metrics_rows,
    rss_tree_mb,
    wait_maddr,
)

SWARM_ID = "soak"
SAMPLE_S = 5.0
ATTACKERS = {"bomber": 2.0, "relay": 0.1, "staller": 30.0, "leech": 2.0, "dialer": 10.0, "flooder": 10.0,
             "bloater": 5.0}  # bench/reliability/soak/roles.py role → its --period-s

def node_config(out: Path, name: str, seed: int) -> Path:
    cfg = yaml.safe_load((ROOT / "examples" / "lab-swarm.yaml").read_text())
    cfg.update(name=name, seed=seed, rounds=1_000_000, torch_threads=1)
    cfg["eval"] = {"every": 0, "at_start": False}
    cfg["checkpoint"] = {"every": 1, "keep": 2}
    path = out / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def schedule(quiet_s: float, total_s: float, kill_every_s: float, attackers: bool = False) -> list:
    """(time from the start of the quiet phase, action, target) for the disturbed phase."""
    d = total_s - quiet_s
    ev = [(quiet_s + f * d, a, t) for f, a, t in [*([(0.10, "join", a) for a in ATTACKERS]
                                                     + [(0.95, "leave", a) for a in ATTACKERS] if attackers else []),
        (0.05, "join", "slow"), (0.30, "leave", "slow"), (0.55, "join", "slow"), (0.75, "leave", "slow"),
        (0.20, "join", "garbage"), (0.40, "leave", "garbage"), (0.65, "join", "garbage"), (0.85, "leave", "garbage"),
        (0.15, "ghost", "ghost"), (0.50, "ghost", "ghost"), (0.80, "ghost", "ghost"),
        (0.45, "kill9", "bootstrap")]]
    t = quiet_s + kill_every_s
    while t < total_s - 30:
        ev.append((t, "kill9", "lab-?"))  # drawn at the time among the running lab-1 … lab-N-1
        t += kill_every_s
    return sorted(ev)


def fmt_s(s: float) -> str:
    return f"{int(s // 60):d}:{int(s % 60):02d}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    class OneLine(argparse.ArgumentParser):
        def error(self, message: str):
            print(f"bench.reliability.soak: error: {message}", file=sys.stderr)
            raise SystemExit(2)
    ap = OneLine(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=60.0, help="length of the soak after start-up (default 60)")
    ap.add_argument("--quiet-minutes", type=float, default=None, help="the quiet phase (default: minutes / 6)")
    ap.add_argument("--kill-every-s", type=float, default=None, help="seconds between kills (default: disturbed / 12, ≥ 45)")
    ap.add_argument("--nodes", type=int, default=4, help="lab nodes (default 4; ≥ 2)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the kill draws")
    ap.add_argument("--out", default="runs/soak", help="logs, metrics, checkpoints (a previous soak's is replaced)")
    ap.add_argument("--name", default="soak", help="results file bench/results/reliability/<name>.json")
    ap.add_argument("--attackers", action="store_true", help="the exhaustion attackers join the disturbed phase")
    args = ap.parse_args(argv)
    if not 2 <= args.minutes <= 24 * 60:
        ap.error(f"--minutes {args.minutes:g}: must be between 2 and 1440")
    args.quiet_minutes = args.minutes / 6 if args.quiet_minutes is None else args.quiet_minutes
    if not 0.5 <= args.quiet_minutes <= args.minutes - 1:
        ap.error(f"--quiet-minutes {args.quiet_minutes:g}: must be ≥ 0.5 and leave ≥ 1 disturbed minute")
    dist_s = (args.minutes - args.quiet_minutes) * 60
    args.kill_every_s = max(45.0, dist_s / 12) if args.kill_every_s is None else args.kill_every_s
    if not 20 <= args.kill_every_s <= dist_s:
        ap.error(f"--kill-every-s {args.kill_every_s:g}: must be between 20 and the disturbed phase ({dist_s:.0f} s)")
    if not 2 <= args.nodes <= 16:
        ap.error(f"--nodes {args.nodes}: must be between 2 and 16")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", args.name):
        ap.error(f"--name {args.name!r}: letters, digits, '_', '.', '-' only")
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / "soak.marker").exists())):
        ap.error(f"--out {out}: exists and is not a previous soak's directory")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    for sig in (signal.SIGINT, signal.SIGTERM):  # under nohup … & SIGINT is ignored: both stop the soak in order
        signal.signal(sig, signal.default_int_handler)
    from node.models.load import fetch

    model = yaml.safe_load((ROOT / "examples" / "lab-swarm.yaml").read_text())["model"]["spec"]
    fetch(model)  # built once here (on every core, before pinning), not by each node at once on core 0
    os.sched_setaffinity(0, {0})  # this process and everything it starts: core 0 only
    out = Path(args.out).resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    (out / "soak.marker").write_text("bench/reliability/soak/__main__.py\n")
    cli = [sys.executable, "-m", "ops.cli"]
    port = free_port()
    boot = Role("bootstrap", cli + ["bootstrap", "--host-maddrs", f"/ip4/127.0.0.1/tcp/{port}", "--identity",
                                    str(out / "bootstrap.key"), "--swarm-id", SWARM_ID], out / "bootstrap.log")
    boot.start()
    maddr = wait_maddr(boot, 0)
    roles: dict[str, Role] = {"bootstrap": boot}
    names = [f"lab-{i}" for i in range(args.nodes)] + ["slow"]
    for i, name in enumerate(names):
        roles[name] = Role(name, cli + ["node", "--config", str(node_config(out, name, i)), "--out", str(out / name),
                                        "--identity", str(out / f"{name}.key"), "--initial-peers", maddr,
                                        "--swarm-id", SWARM_ID], out / name / "node.log")
    for name in names[:-1]:
        roles[name].start()
    hostile = cli[:1] + ["-m", "bench.reliability.soak.roles"]
    peer_args = ["--initial-peer", maddr, "--swarm-id", SWARM_ID]
    print(f"soak: bootstrap {maddr}; {args.nodes} lab nodes starting on core 0 (out {out})", flush=True)
    t_up = time.monotonic()
    try:
        while not all(metrics_rows(out / n) for n in names[:-1]):
            if (dead := [n for n in names[:-1] if not roles[n].alive()]):
                raise SystemExit(f"soak: {dead} exited during start-up; see {out}")
            if time.monotonic() - t_up > 900:
                raise SystemExit("soak: the nodes did not finish a round in 15 min")
            time.sleep(1)
    except BaseException:  # stopped or failed during start-up: stop what was started
        for role in roles.values():
            role.end("stopped_in_startup", signal.SIGINT)
        raise
    startup_s = time.monotonic() - t_up
    total_s, quiet_s = args.minutes * 60, args.quiet_minutes * 60
    events = schedule(quiet_s, total_s, args.kill_every_s, args.attackers)
    for a, period in ATTACKERS.items() if args.attackers else ():  # other machines: core 1
        roles[a] = Role(a, hostile + [a, *peer_args, "--period-s", str(period)], out / f"{a}.log", core=1)
    t0_wall, t0 = time.time(), time.monotonic()
    print(f"soak: all nodes up after {startup_s:.0f} s; quiet {fmt_s(quiet_s)}, then {len(events)} events "
          f"until {fmt_s(total_s)}", flush=True)
    log_sizes_at_disturbed: dict[str, int] | None = None
    done, restarts, pending = [], [], {}  # pending: role name → (due, why)
    wanted = {"bootstrap", *names[:-1]}  # what should be running now (a supervisor restarts it if it is not)
    throttle = Throttle(roles["slow"])
    throttle.start()
    slow_rows_at_start = 0
    rng = random.Random(args.seed)
    rss_f = open(out / "rss.jsonl", "w")
    next_sample = next_print = 0.0
    ghosts = 0
    try:
        while (now := time.monotonic() - t0) < total_s:
            if log_sizes_at_disturbed is None and now >= quiet_s:
                log_sizes_at_disturbed = {str(p.relative_to(out)): p.stat().st_size for p in out.rglob("*.log")}
            while events and events[0][0] <= now:
                _, action, target = events.pop(0)
                rec = {"t": round(now, 1), "action": action, "target": target}
                if action == "kill9":
                    if target == "lab-?":
                        running = [n for n in names[1:-1] if roles[n].alive() and n not in pending
                                   and len(metrics_rows(out / n)) > roles[n].rows_at_start]
                        target = rec["target"] = rng.choice(running) if running else None
                    if target is not None:
                        role = roles[target]
                        role.end("kill9", signal.SIGKILL)
                        rec["wall"] = role.lives[-1]["end"]
                        pending[target] = (now + (30 if target == "bootstrap" else 10), "kill9")
                elif action == "join":
                    if target == "garbage":
                        roles["garbage"] = roles.get("garbage") or Role("garbage", hostile + ["garbage", *peer_args],
                                                                        out / "garbage.log")
                    roles[target].start()
                    wanted.add(target)
                    rec["wall"] = roles[target].lives[-1]["start"]
                    if target == "slow":
                        slow_rows_at_start = len(metrics_rows(out / "slow"))
                elif action == "leave":
                    wanted.discard(target)
                    pending.pop(target, None)
                    if target == "slow":
                        throttle.pause()
                    roles[target].end("sigint", signal.SIGINT)
                    rec["wall"] = roles[target].lives[-1]["end"]
                elif action == "ghost":
                    ghosts += 1
                    roles[f"ghost-{ghosts}"] = g = Role(f"ghost-{ghosts}", hostile + ["ghost", *peer_args],
                                                       out / f"ghost-{ghosts}.log")
                    g.start()
                    rec["wall"] = g.lives[-1]["start"]
                done.append(rec)
            for name in list(wanted):  # ended on its own (ghosts leave by design and are not watched)
                role = roles[name]
                if name not in pending and role.lives and role.lives[-1]["end"] is None and not role.alive():
                    role.lives[-1].update(end=time.time(), how="exited", rc=role.proc.returncode)
                    print(f"soak: {name} exited on its own (rc {role.proc.returncode}); restarting it in 10 s", flush=True)
                    done.append({"t": round(now, 1), "action": "exited", "target": name, "rc": role.proc.returncode})
                    pending[name] = (now + 10, "exited")
            for name, (due, why) in list(pending.items()):
                if due <= now:
                    del pending[name]
                    role = roles[name]
                    left = role.reap_group()  # what the dead main process left running 10 s (bootstrap: 30 s) later
                    role.start()
                    restarts.append({"target": name, "why": why, "ended_at": role.lives[-2]["end"],
                                     "restarted_at": role.lives[-1]["start"], "left_running": len(left)})
                    if name == "slow":
                        throttle.pause()
                        slow_rows_at_start = len(metrics_rows(out / "slow"))
            if "slow" in wanted and not throttle.active.is_set() and roles["slow"].alive() \
                    and len(metrics_rows(out / "slow")) > slow_rows_at_start:
                throttle.active.set()  # its first round of this life is done: from now on a slow machine
            if now >= next_sample:
                next_sample = now + SAMPLE_S
                for role in roles.values():
                    if role.alive():
                        rss = rss_tree_mb(role.proc.pid)
                        if rss is not None:
                            cpu = rss.pop("cpu_s")
                            rss_f.write(json.dumps({"t": round(now, 1), "name": role.name, "life": len(role.lives) - 1,
                                                    "rss_mb": rss["total"], "parts_mb": rss, "cpu_s": cpu}) + "\n")
                rss_f.flush()
            if now >= next_print:
                next_print = now + 30
                rounds = " ".join(f"{n} {len(metrics_rows(out / n))}" for n in names if (out / n).exists())
                phase = "quiet" if now < quiet_s else "disturbed"
                print(f"[soak] {fmt_s(now)} / {fmt_s(total_s)} ({phase}), ETA {fmt_s(total_s - now)}; rounds: {rounds}; "
                      f"events {len(done)}, restarts {len(restarts)}", flush=True)
            time.sleep(0.5)
    finally:
        throttle.done.set()
        throttle.join()  # it leaves the slow peer running
        rss_f.close()
        for role in roles.values():  # an orderly shutdown of everything still running
            if role.alive():
                role.end("sigint_at_end", signal.SIGINT)
        for role in roles.values():
            role.reap_group()
    from bench.reliability.soak.report import report

    run = {"startup_s": startup_s, "t0": t0_wall, "quiet_s": quiet_s, "total_s": total_s, "events": done,
           "restarts": restarts, "lives": {n: r.lives for n, r in roles.items()},
           "log_sizes_at_disturbed": log_sizes_at_disturbed or {}, "maddr": maddr, "nodes": names[:-1],
           "attackers": sorted(ATTACKERS) if args.attackers else []}
    (out / "run.json").write_text(json.dumps({"args": vars(args), "run": run}))  # python -m bench.reliability.soak.report OUT
    report(out, args, run)


if __name__ == "__main__":
    main()
