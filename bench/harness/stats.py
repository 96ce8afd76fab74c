"""The statistics every bench reports: one two-sided 95 % Student t quantile, the interval of a mean over
seeds and of a paired difference.

    t95(df)            the t quantile: a table to 30 degrees of freedom, then 1.96 + 2.4 / df
    interval(xs)       (mean, half-width of the 95 % t-interval); half-width 0 for a single value
    summary(xs)        {n, mean, sd, ci95: [lo, hi], min} (n and mean only for a single value)
    paired(a, b)       interval of a[i] − b[i]: two arms' values paired by seed
    fields(rows, fs)   {f: mean, f_ci: half-width} over the rows that have f (one row per seed)
    paired_fields      {f, f_ci, f_positive} of arm a − arm b, by seed, per field; None under `least` seeds
    mean_of(xs)        the mean of the values that are not None (None when there are none)
"""

from __future__ import annotations

import math
import statistics

T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
         20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048,
         29: 2.045, 30: 2.042}


def t95(df: int) -> float:
    """Two-sided 95 % Student t quantile with `df` degrees of freedom."""
    return T_975[df] if df in T_975 else 1.96 + 2.4 / df


def interval(xs: list[float]) -> tuple[float, float]:
    """(mean, half-width of the 95 % t-interval); half-width 0 for a single value."""
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, 0.0
    return m, t95(len(xs) - 1) * statistics.stdev(xs) / len(xs) ** 0.5


def summary(values: list[float]) -> dict:
    """Mean, standard deviation and 95 % t-interval of per-seed values."""
    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return {"n": n, "mean": mean}
    sd = statistics.stdev(values)
    half = t95(n - 1) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "ci95": [mean - half, mean + half], "min": min(values)}


def paired(a: list[float], b: list[float]) -> tuple[float, float]:
    """(mean, half-width) of the differences a[i] − b[i] (the same seed in both arms)."""
    return interval([x - y for x, y in zip(a, b)])


def mean_of(xs) -> float | None:
    """The mean of the values that are not None; None when there are none."""
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def fields(rows, names) -> dict:
    """{f: mean, f + "_ci": half-width} of each field over the rows where it is set (fields set in none: left out)."""
    out = {}
    for f in names:
        xs = [r[f] for r in rows if r.get(f) is not None]
        if xs:
            out[f], out[f + "_ci"] = interval(xs)
    return out


def paired_fields(a: dict, b: dict, names, least: int = 2) -> dict | None:
    """Arm a − arm b, each {seed: row}, paired by seed: {"seeds", f, f_ci, f_positive} for each field set in both
    rows of at least two seeds; None when fewer than `least` seeds are in both arms."""
    seeds = sorted(set(a) & set(b))
    if len(seeds) < least:
        return None
    d = {"seeds": len(seeds)}
    for f in names:
        xs = [a[s][f] - b[s][f] for s in seeds if a[s].get(f) is not None and b[s].get(f) is not None]
        if len(xs) >= 2:
            d[f], d[f + "_ci"] = interval(xs)
            d[f + "_positive"] = sum(x > 0 for x in xs)
    return d
