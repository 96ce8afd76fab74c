"""The arms runner: a benchmark is its arm table, its jobs (arms × seeds × whatever else it varies), and its report
(paired differences by seed, the decision rules written before the runs). A script states those; this module runs
them and does the arithmetic, so every bench pairs, counts and judges the same way.

    pending(jobs, done, key)         the jobs whose key (a tuple of job fields) no row of the results file has yet
    run_arms(fn, jobs, sink, workers, describe, key)
                                     the results file's rows, plus the pending jobs run in the resumable pool
                                     (pool.run_jobs), each appended as it ends: an interrupted bench resumes
    cells(runs, keys)                {key values: {seed: row}}: the rows of each cell (an arm, an arm at a size, ...)
                                     by seed
    compare(cells, pairs, fields)    for each pair (a, b) of cells: a − b paired by seed, per field, with its 95 %
                                     t-interval and how many seeds came out positive (stats.paired_fields)
    Rule                             a decision rule: pair a − b of one field, what it means when it holds, and the
                                     test (the interval excludes 0 above it, or the mean at least a bound)
    judge(diffs, rules)              one line per rule whose pair was measured: YES / no — it is worse / not shown,
                                     with the difference, its interval and the seeds positive
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from pathlib import Path

from bench.harness.output import load_jsonl
from bench.harness.pool import run_jobs
from bench.harness.stats import paired_fields


def pending(jobs: Iterable[dict], done: Iterable[dict], key: tuple[str, ...]) -> list[dict]:
    """The jobs whose `key` fields match no row already done (a results file's rows carry the same fields)."""
    have = {tuple(r.get(k) for k in key) for r in done}
    return [j for j in jobs if tuple(j.get(k) for k in key) not in have]


def run_arms(fn: Callable[[dict], dict], jobs: list[dict], sink: Path, workers: int, describe: Callable[[dict], str],
             key: tuple[str, ...]) -> list[dict]:
    """Every row of `sink` (JSONL) plus the rows of the jobs not yet in it, run by `fn` in `workers` processes."""
    runs = load_jsonl(sink)
    todo = pending(jobs, runs, key)
    return runs + (run_jobs(fn, todo, sink, workers, describe) if todo else [])


def cells(runs: Iterable[dict], keys: tuple[str, ...], seed: str = "seed") -> dict[tuple, dict[Hashable, dict]]:
    """{tuple of the `keys` values: {seed: row}}, in the order the cells first appear (a later row of a seed wins)."""
    out: dict[tuple, dict[Hashable, dict]] = {}
    for r in runs:
        out.setdefault(tuple(r[k] for k in keys), {})[r[seed]] = r
    return out


def compare(by_cell: dict, pairs: Iterable[tuple[Hashable, Hashable]], fields: Iterable[str], least: int = 2,
            label: Callable[[Hashable, Hashable], dict] | None = None, per_seed: str | None = None) -> list[dict]:
    """For each pair (a, b) of cell keys present in `by_cell`: {**label(a, b), "seeds", f, f_ci, f_positive} of
    a − b paired by seed (stats.paired_fields); pairs with fewer than `least` common seeds are left out. `label`
    names the pair's row (default {"pair": "a − b"} of the cells' last keys); `per_seed`: a field whose differences,
    seed by seed in seed order, are added as one string."""
    fields = tuple(fields)
    out = []
    for a, b in pairs:
        if a not in by_cell or b not in by_cell:
            continue
        d = paired_fields(by_cell[a], by_cell[b], fields, least)
        if d is None:
            continue
        name = label(a, b) if label else {"pair": f"{_last(a)} − {_last(b)}"}
        out.append({**name, **d})
        if per_seed is not None:
            xa, xb = by_cell[a], by_cell[b]
            out[-1]["per_seed"] = " ".join(f"{xa[s][per_seed] - xb[s][per_seed]:+.3f}" for s in sorted(set(xa) & set(xb))
                                           if xa[s].get(per_seed) is not None and xb[s].get(per_seed) is not None)
    return out


def _last(cell: Hashable):
    return cell[-1] if isinstance(cell, tuple) else cell


@dataclass(frozen=True)
class Rule:
    """A decision rule fixed before the runs: `pair` ("A − B", as compare names it) on `field` means `says`.
    `at_least` None: it holds when the 95 % interval excludes 0 above it (YES), and the line says "no — it is
    worse" when it excludes 0 below; a number: it holds when the mean is at least that (a bound of no harm)."""

    pair: str
    says: str
    field: str = "gain"
    at_least: float | None = None

    def holds(self, d: dict) -> bool:
        m, h = d[self.field], d[self.field + "_ci"]
        return m - h > 0 if self.at_least is None else m >= self.at_least

    def verdict(self, d: dict) -> str:
        if self.holds(d):
            return "YES"
        worse = self.at_least is None and d[self.field] + d[self.field + "_ci"] < 0
        return "no — it is worse" if worse else "not shown" if self.at_least is None else "no"

    def line(self, d: dict) -> str:
        m, h = d[self.field], d[self.field + "_ci"]
        return (f"{self.says}: {self.verdict(d)} ({self.pair} {m:+.3f} ± {h:.3f}, "
                f"{d.get(self.field + '_positive', '?')}/{d['seeds']} seeds positive)")


def judge(diffs: Iterable[dict], rules: Iterable[Rule], prefix: Callable[[dict], str] | None = None) -> list[str]:
    """One line per (difference, rule) whose pair and field the difference holds, in the order of `diffs`;
    `prefix(d)` opens each line (a pairing, an update and size)."""
    rules = list(rules)
    out = []
    for d in diffs:
        for rule in rules:
            if d.get("pair") == rule.pair and rule.field in d:
                out.append((prefix(d) if prefix else "") + rule.line(d))
    return out
