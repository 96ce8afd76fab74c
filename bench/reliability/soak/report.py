"""The report of bench/reliability/soak/__main__.py: everything computed from the run's directory (metrics.jsonl, rss.jsonl, logs).

Per node and phase: round time p50/p95, rounds, peers' groups trained on, drops by reason, what the transport
refused (streams, repeat serves, dials), RSS slope
(% per hour, least squares over the samples of one process life, the first WARMUP_S of a life left out);
per restart: resumed or fresh, rounds lost beyond the interrupted one; tracebacks per log and phase.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter
from pathlib import Path

from bench.harness.output import results_dir, table, write_json

RESULTS = results_dir("reliability")

WARMUP_S = 120.0  # RSS of a fresh process settles (imports, first rounds, allocator pools) before it is fitted
MIN_FIT_S = 300.0  # a slope from less than 5 min of samples is not reported
GOAL_FIT_S = 900.0  # the RSS goal is judged on lives followed ≥ 15 min (a % per hour from minutes is a guess)
TRACEBACK = "Traceback (most recent call last)"


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def _fit(samples: list[tuple[float, float]]) -> tuple[float | None, float | None, float]:
    """Least-squares line through (t, MB): (slope in MB/s, fitted value at the first t, span in s);
    (None, None, span) under 3 samples or MIN_FIT_S."""
    if len(samples) < 3:
        return None, None, 0.0
    ts, ys = [t for t, _ in samples], [y for _, y in samples]
    span = ts[-1] - ts[0]
    if span < MIN_FIT_S:
        return None, None, span
    slope, intercept = statistics.linear_regression(ts, ys)
    return slope, intercept + slope * ts[0], span


def slope_pct_per_h(samples: list[tuple[float, float]]) -> tuple[float | None, float]:
    """(least-squares RSS growth in % per hour relative to the fitted start, span of the fit in s)."""
    slope, start, span = _fit(samples)
    return (None if slope is None else slope * 3600 / start * 100), span


def read_jsonl(path: Path) -> list[dict]:
    rows = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return rows


def tracebacks(out: Path, sizes_at: dict[str, int]) -> dict[str, dict]:
    """Per log: tracebacks in the quiet and the disturbed phase (bytes before / after the boundary) and
    the exception line ending each one."""
    res = {}
    for log in sorted(out.rglob("*.log")):
        key = str(log.relative_to(out))
        data = log.read_bytes()
        cut = sizes_at.get(key, 0)
        text = data.decode(errors="replace")
        kinds = []
        for m in re.finditer(re.escape(TRACEBACK), text):
            tail = text[m.end():].splitlines()
            last = next((ln for ln in tail[1:] if ln and not ln.startswith((" ", "\t", "Traceback"))), "?")
            kinds.append(last.strip()[:160])
        res[key] = {"quiet": data[:cut].count(TRACEBACK.encode()), "disturbed": data[cut:].count(TRACEBACK.encode()),
                    "exceptions": dict(Counter(kinds))}
    return res


def rss_lives(out: Path, t0_rel_quiet: float) -> list[dict]:
    """One row per (process, life, phase) and per whole life: the fitted slope."""
    by: dict[tuple[str, int], list[tuple[float, float]]] = {}
    parts: dict[tuple[str, int], dict[str, list[tuple[float, float]]]] = {}
    for r in read_jsonl(out / "rss.jsonl"):
        by.setdefault((r["name"], r["life"]), []).append((r["t"], r["rss_mb"]))
        for part, mb in (r.get("parts_mb") or {}).items():
            if part != "total":
                parts.setdefault((r["name"], r["life"]), {}).setdefault(part, []).append((r["t"], mb))
    rows = []
    for (name, life), samples in sorted(by.items()):
        if name.startswith("ghost"):
            continue
        first = samples[0][0]
        settled = [(t, y) for t, y in samples if t - first >= WARMUP_S]
        for phase, sel in (("quiet", [s for s in settled if s[0] < t0_rel_quiet]),
                           ("disturbed", [s for s in settled if s[0] >= t0_rel_quiet]), ("life", settled)):
            slope, span = slope_pct_per_h(sel)
            rows.append({"name": name, "life": life, "phase": phase, "samples": len(sel), "fit_min": round(span / 60, 1),
                         "rss_first_mb": sel[0][1] if sel else None, "rss_last_mb": sel[-1][1] if sel else None,
                         "rss_max_mb": max((y for _, y in sel), default=None),
                         "growth_pct_per_h": None if slope is None else round(slope, 2)})
            if phase == "life" and (name, life) in parts:  # where the growth is: MB per hour of each part
                rows[-1]["parts_mb_first_last_per_h"] = {
                    part: _mb_per_h([(t, y) for t, y in ps if t - first >= WARMUP_S])
                    for part, ps in parts[(name, life)].items()}
    return rows


def _mb_per_h(sel: list[tuple[float, float]]) -> list | None:
    """[first MB, last MB, fitted MB per hour] of one part's samples (None under MIN_FIT_S)."""
    slope, _, _ = _fit(sel)
    return None if slope is None else [sel[0][1], sel[-1][1], round(slope * 3600, 2)]


def cpu_bins(out: Path, bin_s: float = 300.0) -> dict[str, dict[str, dict[str, float]]]:
    """Where the CPU went: per process (bootstrap, lab-N, slow, attackers) and bin of `bin_s` seconds from the
    start, the share of one core each part used ("main", "child": the DHT process, "p2pd"), in %, from the
    cumulative CPU seconds of successive samples of one life, over the time those samples cover."""
    last: dict[tuple[str, int], tuple[float, dict]] = {}
    spent: dict[str, dict[int, Counter]] = {}
    for r in read_jsonl(out / "rss.jsonl"):
        key, cpu = (r["name"], r["life"]), r.get("cpu_s")
        if cpu is None or r["name"].startswith("ghost"):
            continue
        if key in last:
            t_prev, prev = last[key]
            c = spent.setdefault(r["name"], {}).setdefault(int(r["t"] // bin_s), Counter())
            c["_covered"] += r["t"] - t_prev
            for part, sec in cpu.items():
                c[part] += max(0.0, sec - prev.get(part, 0.0))
        last[key] = (r["t"], cpu)
    return {name: {str(int(b * bin_s)): {part: round(100 * sec / c["_covered"], 1) for part, sec in c.items()
                                         if part != "_covered"}
                   for b, c in sorted(bins.items()) if c["_covered"] > 0} for name, bins in spent.items()}


def node_phases(rows: list[dict], t0: float, quiet_s: float, total_s: float) -> dict[str, dict]:
    out = {}
    for phase, lo, hi in (("quiet", t0, t0 + quiet_s), ("disturbed", t0 + quiet_s, t0 + total_s)):
        sel = [m for m in rows if lo <= m["time"] < hi]
        rs = [m["round_s"] for m in sel]
        drops: Counter = Counter()
        refused: Counter = Counter()
        for m in sel:
            drops.update(m.get("drops") or {})
            refused.update(m.get("refused") or {})
        out[phase] = {"rounds": len(sel), "round_p50_s": pct(rs, 0.5), "round_p95_s": pct(rs, 0.95),
                      "round_max_s": max(rs, default=None),
                      "groups_external": sum(m.get("groups_external", 0) for m in sel), "drops": dict(drops),
                      "refused": dict(refused)}
    return out


def restarts_of(name: str, rows: list[dict], lives: list[dict]) -> list[dict]:
    """Each life after the first: how the previous one ended, whether the new one resumed, rounds lost."""
    res = []
    for prev, life in zip(lives, lives[1:]):
        before = [m["round"] for m in rows if m["time"] <= (prev["end"] or life["start"])]
        after = [m for m in rows if life["start"] < m["time"] <= (life["end"] or float("inf"))]
        first = after[0] if after else None  # None: this life never finished a round (e.g. it failed to start)
        last_done = max(before, default=None)
        rec = {"node": name, "ended_by": prev["how"], "last_round_before": last_done,
               "first_round_after": first["round"] if first else None, "start": first.get("start") if first else None,
               "start_from": first.get("start_from") if first else None,
               "resumed": (first.get("start") == "resumed") if first else None, "life_ended_by": life["how"],
               "restart_to_first_round_s": round(first["time"] - life["start"], 1) if first else None}
        # the interrupted round is last_done + 1; anything before it that is re-run was lost
        rec["rounds_lost_beyond_interrupted"] = (max(0, last_done + 1 - first["round"]) if first and last_done is not None
                                                 else None)
        res.append(rec)
    return res


def memory_goal(out: Path, run: dict, quiet_s: float) -> dict:
    """lab-0 (never killed): its highest RSS in the disturbed phase over its median RSS in the last third of the
    quiet phase (MiB, as rss.jsonl records them); the goal: at most 64 MiB more."""
    name = run["nodes"][0]
    samples = [(r["t"], r["rss_mb"]) for r in read_jsonl(out / "rss.jsonl") if r["name"] == name and r["life"] == 0]
    quiet = [y for t, y in samples if 2 * quiet_s / 3 <= t < quiet_s]
    disturbed = [y for t, y in samples if t >= quiet_s]
    if not quiet or not disturbed:
        return {"met": False, "why": "no samples"}
    grown = max(disturbed) - statistics.median(quiet)
    return {"met": grown <= 64, "node": name, "quiet_median_mb": round(statistics.median(quiet), 1),
            "disturbed_max_mb": round(max(disturbed), 1), "grown_mb": round(grown, 1)}


def report(out: Path, args, run: dict) -> dict:
    t0, quiet_s, total_s = run["t0"], run["quiet_s"], run["total_s"]
    nodes = run["nodes"] + ["slow"]
    per_node, restarts = {}, []
    for name in nodes:
        rows = read_jsonl(out / name / "metrics.jsonl")
        per_node[name] = node_phases(rows, t0, quiet_s, total_s)
        restarts += restarts_of(name, rows, run["lives"].get(name, []))
    rss = rss_lives(out, quiet_s)
    tbs = tracebacks(out, run["log_sizes_at_disturbed"])
    # goals
    ratios = {n: (per_node[n]["disturbed"]["round_p95_s"] / per_node[n]["quiet"]["round_p95_s"])
              for n in run["nodes"] if per_node[n]["quiet"]["round_p95_s"] and per_node[n]["disturbed"]["round_p95_s"]}
    attackers = set(run.get("attackers", []))  # their own logs and memory are reported, not judged: not our nodes
    judged = [r for r in rss if r["phase"] == "life" and r["growth_pct_per_h"] is not None
              and r["fit_min"] * 60 >= GOAL_FIT_S and r["name"] not in attackers]
    worst_rss = max(judged, key=lambda r: r["growth_pct_per_h"], default=None)
    n_tb = sum(v["quiet"] + v["disturbed"] for k, v in tbs.items() if k.split(".")[0] not in attackers)
    node_restarts = [r for r in restarts if r["resumed"] is not None]  # lives that finished a round
    no_round = [r for r in restarts if r["resumed"] is None and r["life_ended_by"] != "sigint_at_end"]
    lost = [r["rounds_lost_beyond_interrupted"] for r in node_restarts if r["rounds_lost_beyond_interrupted"] is not None]
    slow_q = per_node["slow"]["disturbed"]["round_p50_s"]
    lab_d = [per_node[n]["disturbed"]["round_p50_s"] for n in run["nodes"] if per_node[n]["disturbed"]["round_p50_s"]]
    goals = {
        "rss_growth_lt_5pct_per_h": {"met": bool(worst_rss) and worst_rss["growth_pct_per_h"] < 5,
                                     "worst": worst_rss, "lives_judged": len(judged)},
        "p95_within_1_5x_quiet": {"met": bool(ratios) and max(ratios.values()) <= 1.5,
                                  "ratio_per_node": {k: round(v, 3) for k, v in ratios.items()}},
        "every_restart_resumes": {"met": bool(node_restarts) and all(r["resumed"] for r in node_restarts),
                                  "restarts": len(node_restarts), "resumed": sum(r["resumed"] for r in node_restarts),
                                  "starts_that_finished_no_round": len(no_round),
                                  "rounds_lost_beyond_interrupted": {"total": sum(lost), "max": max(lost, default=None)}},
        "zero_tracebacks": {"met": n_tb == 0, "tracebacks": n_tb},
        "memory_within_64mib_of_quiet": memory_goal(out, run, quiet_s),
    }
    payload = {"args": {k: v for k, v in vars(args).items()}, "startup_s": round(run["startup_s"], 1),
               "quiet_s": quiet_s, "total_s": total_s, "maddr": run["maddr"], "goals": goals,
               "slow_peer_vs_lab_p50": round(slow_q / statistics.median(lab_d), 2) if slow_q and lab_d else None,
               "per_node": per_node, "restarts": restarts, "rss": rss, "tracebacks": tbs, "events": run["events"],
               "kill9_left_running": [{"target": r["target"], "left_running": r["left_running"]} for r in run["restarts"]],
               "lives": run["lives"], "cpu_pct_of_a_core_by_300s": cpu_bins(out)}
    path = write_json(args.name, payload, RESULTS)
    print_summary(payload)
    print(f"wrote {path}")
    return payload


def print_summary(p: dict) -> None:
    rows = []
    for name, ph in p["per_node"].items():
        for phase, v in ph.items():
            rows.append({"node": name, "phase": phase, "rounds": v["rounds"], "p50_s": v["round_p50_s"],
                         "p95_s": v["round_p95_s"], "max_s": v["round_max_s"], "ext_groups": v["groups_external"],
                         "drops": " ".join(f"{k}:{c}" for k, c in sorted(v["drops"].items()) if c) or "-"})
    print(table(rows, ["node", "phase", "rounds", "p50_s", "p95_s", "max_s", "ext_groups", "drops"]))
    print(table([r for r in p["rss"] if r["growth_pct_per_h"] is not None],
                ["name", "life", "phase", "fit_min", "rss_first_mb", "rss_last_mb", "growth_pct_per_h"]))
    print(table(p["restarts"], ["node", "ended_by", "last_round_before", "first_round_after", "start",
                                "rounds_lost_beyond_interrupted", "restart_to_first_round_s", "life_ended_by"]))
    cpu = p.get("cpu_pct_of_a_core_by_300s") or {}
    if cpu:
        bins = sorted({b for v in cpu.values() for b in v}, key=int)
        print(table([{"process": n, **{f"{b}s": sum(v.get(b, {}).values()) for b in bins}} for n, v in cpu.items()],
                    ["process", *[f"{b}s" for b in bins]]))
    for log, v in p["tracebacks"].items():
        if v["quiet"] or v["disturbed"]:
            print(f"traceback in {log}: quiet {v['quiet']}, disturbed {v['disturbed']}: {v['exceptions']}")
    for k, g in p["goals"].items():
        print(f"goal {k}: {'met' if g['met'] else 'NOT met'} {json.dumps({a: b for a, b in g.items() if a != 'met'})}")


def main(argv: list[str] | None = None) -> None:
    """The report again from a finished soak's directory: python -m bench.reliability.soak.report OUT"""
    import argparse

    ap = argparse.ArgumentParser(description="the soak's report again, from a finished soak's directory")
    ap.add_argument("out", type=Path, help="the soak's --out directory (holds run.json)")
    out = ap.parse_args(argv).out
    saved = json.loads((out / "run.json").read_text())
    report(out, argparse.Namespace(**saved["args"]), saved["run"])


if __name__ == "__main__":
    main()
