"""bench.harness.arms: jobs not yet in a results file, cells by seed, paired differences by seed against a hand
computation, the decision rules' three outcomes, and a resumed run that runs only what is missing."""

from __future__ import annotations

import json
import statistics

import pytest

from bench.harness.arms import Rule, cells, compare, judge, pending, run_arms
from bench.harness.stats import t95


def _run(arm: str, seed: int, gain: float, **kw) -> dict:
    return {"arm": arm, "seed": seed, "gain": gain, **kw}


def test_pending_leaves_out_the_jobs_a_results_row_already_holds():
    jobs = [{"arm": a, "seed": s, "rounds": 30, "config": "x"} for a in "AB" for s in (0, 1)]
    done = [{"arm": "A", "seed": 1, "rounds": 30, "gain": 0.1}, {"arm": "B", "seed": 0, "rounds": 20, "gain": 0.2}]
    left = pending(jobs, done, ("arm", "seed", "rounds"))
    assert [(j["arm"], j["seed"]) for j in left] == [("A", 0), ("B", 0), ("B", 1)]  # B seed 0 ran at other rounds


def test_compare_pairs_by_seed_as_a_hand_computation_does():
    runs = [_run("B", 0, 0.30), _run("B", 1, 0.25), _run("B", 2, 0.40), _run("B", 3, 0.90),
            _run("A", 0, 0.20), _run("A", 1, 0.27), _run("A", 2, 0.31), _run("A", 9, 0.0)]
    by = cells(runs, ("arm",))
    assert set(by[("B",)]) == {0, 1, 2, 3} and set(by[("A",)]) == {0, 1, 2, 9}
    [d] = compare(by, [(("B",), ("A",)), (("B",), ("Z",))], ("gain",), per_seed="gain")
    xs = [0.30 - 0.20, 0.25 - 0.27, 0.40 - 0.31]  # seeds 0-2: in both arms (3 and 9 are not)
    half = t95(2) * statistics.stdev(xs) / 3 ** 0.5
    assert d["pair"] == "B − A" and d["seeds"] == 3 and d["gain_positive"] == 2
    assert d["gain"] == pytest.approx(statistics.fmean(xs)) and d["gain_ci"] == pytest.approx(half)
    assert d["per_seed"] == "+0.100 -0.020 +0.090"
    assert compare(by, [(("B",), ("A",))], ("gain",), least=4) == []  # 3 common seeds < 4


def test_a_later_row_of_a_seed_replaces_the_earlier_one():
    by = cells([_run("A", 0, 0.1), _run("A", 0, 0.5)], ("arm",))
    assert by[("A",)][0]["gain"] == 0.5


def test_rules_say_yes_not_shown_and_worse():
    diffs = [{"pair": "C − D", "seeds": 8, "gain": 0.05, "gain_ci": 0.01, "gain_positive": 8},
             {"pair": "B − A", "seeds": 8, "gain": 0.01, "gain_ci": 0.02, "gain_positive": 5},
             {"pair": "E − A", "seeds": 8, "gain": -0.05, "gain_ci": 0.02, "gain_positive": 0},
             {"pair": "C − A", "seeds": 8, "gain": -0.015, "gain_ci": 0.02, "gain_positive": 3}]
    rules = [Rule("C − D", "sharing saves compute"), Rule("B − A", "SAPO at equal compute"),
             Rule("E − A", "specialties pay"), Rule("C − A", "no harm", at_least=-0.02)]
    lines = judge(diffs, rules, prefix=lambda d: "f-tis: ")
    assert lines == ["f-tis: sharing saves compute: YES (C − D +0.050 ± 0.010, 8/8 seeds positive)",
                     "f-tis: SAPO at equal compute: not shown (B − A +0.010 ± 0.020, 5/8 seeds positive)",
                     "f-tis: specialties pay: no — it is worse (E − A -0.050 ± 0.020, 0/8 seeds positive)",
                     "f-tis: no harm: YES (C − A -0.015 ± 0.020, 3/8 seeds positive)"]
    assert not Rule("C − A", "no harm", at_least=0.0).holds(diffs[3])
    assert judge(diffs, [Rule("C − D", "on another field", field="cum_reward")]) == []  # not measured: no line


def double(job: dict) -> dict:
    return {**job, "gain": job["seed"] * 2.0}


def test_run_arms_resumes_running_only_the_missing_jobs(tmp_path):
    sink = tmp_path / "bench.jsonl"
    sink.write_text(json.dumps({"arm": "A", "seed": 0, "gain": -1.0}) + "\n")  # seed 0 ran before the stop
    jobs = [{"arm": "A", "seed": s} for s in (0, 1, 2)]
    runs = run_arms(double, jobs, sink, 1, lambda r: f"seed {r['seed']}", key=("arm", "seed"))
    assert sorted((r["seed"], r["gain"]) for r in runs) == [(0, -1.0), (1, 2.0), (2, 4.0)]
    assert len(sink.read_text().splitlines()) == 3  # the two new rows appended, the old one kept
    again = run_arms(double, jobs, sink, 1, str, key=("arm", "seed"))  # nothing left: no pool, the same rows
    assert sorted(r["seed"] for r in again) == [0, 1, 2] and len(sink.read_text().splitlines()) == 3
