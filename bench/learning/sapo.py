"""Does sharing help? SAPO's experiment on the lab model: I local + J peers' groups per step.

SAPO reports +94 % cumulative reward for 4 local / 4 external groups against 8 / 0 (8 agents of
Qwen2.5-0.5B, 2000 rounds). Here: 4 lab-model nodes, each generating the same B = I + J groups
per round (equal generation compute) and training on I of its own and J of its peers' (I/J =
8/0, 6/2, 4/4, 2/6), for each update given (`--update`, e.g. SAPO's GRPO with every row treated
as on-policy, and F-TIS), over several seeds.

The nodes run in one process, one after another each round, on the in-memory twin of the
transport (swarm.exchange.twin: the same receive rules and fan-in as the real one), each on one torch
thread, so configurations set only I/J differently. Delivery is by round (bench/harness/swarm.py, `twin`
"rounds"), so every run, with peers or without, reproduces to the last digit. A node's task stream is its own
(tasks.seed = 100·seed + node); the held-out set is shared. Each run is appended to
bench/results/learning/sapo<tag>.jsonl as it ends (bench/harness/arms.py), so an interrupted invocation resumes
where it stopped; `--jobs` runs swarms side by side. Runs with other `--set` or `--update` overrides of the same
name belong under another `--tag`.

Reported per configuration (mean over seeds, 95 % t-interval across seeds; `*_vs_first` is the
difference to the 8/0 run, paired by seed — same task streams, same held-out items; `--combine`
merges result files of separate invocations into one table and plot):
  cum_reward   Σ over rounds of the node's mean reward on its own rollouts, averaged over nodes
               (SAPO's "cumulative reward"; the sum over nodes is 4× this)
  gain         held-out accuracy after − before (tasks.eval_size items, same items), mean of nodes
  worst_node_gain  the lowest single node's gain over all seeds (a node that collapsed shows here)
and a plot: bench/results/learning/sapo<tag>.png.

    python -m bench.learning.sapo --config examples/papers/sapo.yaml --seeds 0 1 2 --rounds 40 \\
        --update sapo= --update "f-tis=loss={name: f-tis}"
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time

from bench.harness.arms import cells, run_arms
from bench.harness.options import parse_sets
from bench.harness.output import pyplot, results_dir, save_figure, table, write_json
from bench.harness.stats import interval
from bench.harness.swarm import run_swarm

RESULTS = results_dir("learning")


def plot(results: list[dict], path) -> None:
    plt = pyplot()

    updates = list(dict.fromkeys(r["update"] for r in results))
    fig, axes = plt.subplots(1, 1 + len(updates), figsize=(5 * (1 + len(updates)), 4))
    for ax, update in zip(axes[:-1], updates):
        for r in (x for x in results if x["update"] == update):
            runs = [list(itertools.accumulate(c)) for run in r["runs"] for c in run["curves"]]
            n = min(len(x) for x in runs)
            mean = [statistics.fmean(x[t] for x in runs) for t in range(n)]
            ax.plot(range(n), mean, label=r["split"])
        ax.set_title(f"cumulative reward per node · {update}")
        ax.set_xlabel("round")
        ax.legend()
    ax = axes[-1]
    labels = [f"{r['split']}\n{r['update']}" for r in results]
    ax.bar(range(len(results)), [r["gain_mean"] for r in results],
           yerr=[r["gain_ci"] for r in results], capsize=4)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(results)), labels, fontsize=7)
    ax.set_title("held-out gain (mean of nodes, 95 % CI over seeds)")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def run_one(job: dict) -> dict:
    """One swarm for one (update, split, seed): run_swarm's summary with the job's names and its wall time."""
    i, j = (int(x) for x in job["split"].split("/"))
    started = time.perf_counter()
    run = run_swarm([job["config"]] * job["nodes"], i, j, job["seed"], job["rounds"], job["overrides"])
    return {**{k: job[k] for k in ("update", "split", "seed", "rounds", "nodes")}, **run,
            "seconds": round(time.perf_counter() - started, 1)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="examples/papers/sapo.yaml")
    ap.add_argument("--splits", nargs="+", default=["8/0", "6/2", "4/4", "2/6"], help="I/J")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--update", action="append", default=None, metavar="NAME=K=V;K=V",
                    help="an update to compare, with config overrides (default: the config's own as 'sapo')")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="overrides for every run")
    ap.add_argument("--jobs", type=int, default=1, help="swarms run side by side (one core each)")
    ap.add_argument("--tag", default="")
    ap.add_argument("--combine", nargs="+", metavar="NAME", help="no runs: merge bench/results/learning/NAME.json files "
                    "(runs of other splits or updates, same seeds) into one table and plot, named by --tag")
    args = ap.parse_args(argv)
    if args.combine:
        return combine(args.combine, args.tag)
    common = parse_sets(args.set)
    updates = {}
    for item in args.update or ["sapo="]:
        name, _, rest = item.partition("=")
        updates[name] = parse_sets(kv for kv in rest.split(";") if kv)
    jobs = [{"update": update, "split": split, "seed": seed, "rounds": args.rounds, "nodes": args.nodes,
             "config": args.config, "overrides": {**common, **over}}
            for update, over in updates.items() for split in args.splits for seed in args.seeds]
    done = run_arms(run_one, jobs, RESULTS / f"sapo{args.tag}.jsonl", args.jobs, lambda r: (
        f"{r['update']} {r['split']} seed {r['seed']}: gain {r['gain']:+.3f} cum {r['cum_reward']:.2f} "
        f"({r['seconds']:.0f} s)"), key=("update", "split", "seed", "rounds", "nodes"))
    by = cells([r for r in done if r["rounds"] == args.rounds and r["nodes"] == args.nodes], ("update", "split"))
    results = []
    for update in updates:
        for split in args.splits:
            runs = [by[(update, split)][s] for s in args.seeds]
            cum_m, cum_ci = interval([r["cum_reward"] for r in runs])
            gain_m, gain_ci = interval([r["gain"] for r in runs])
            results.append({"update": update, "split": split, "seeds": len(runs), "cum_reward_mean": cum_m,
                            "cum_reward_ci": cum_ci, "gain_mean": gain_m, "gain_ci": gain_ci,
                            "external_groups": statistics.fmean(sum(r["external_groups"]) for r in runs),
                            "runs": runs})
    report(results, vars(args), args.tag)


def combine(names: list[str], tag: str) -> None:
    """One table and plot from several result files; each update's rows paired against its 8/0 row
    (or, when it has none, the first 8/0 row of any update: at 8/0 no peer rows exist, so every
    update that treats own rows alike is the same run)."""
    results = []
    for name in names:
        results += json.loads((RESULTS / f"{name}.json").read_text())["results"]
    order = {s: i for i, s in enumerate(["8/0", "6/2", "4/4", "2/6"])}
    results.sort(key=lambda r: (r["update"], order.get(r["split"], 9)))
    report(results, {"combine": names}, tag)


def report(results: list[dict], args: dict, tag: str) -> None:
    """Paired differences, the table, the plot and the results file."""
    for r in results:  # paired by seed against the 8/0 run (the same task streams and held-out items)
        base = next((x for x in results if x["update"] == r["update"] and x["split"] == "8/0"),
                    next((x for x in results if x["split"] == "8/0"), None))
        base = base or next(x for x in results if x["update"] == r["update"])
        diffs = [a["cum_reward"] - b["cum_reward"] for a, b in zip(r["runs"], base["runs"])]
        gdiffs = [a["gain"] - b["gain"] for a, b in zip(r["runs"], base["runs"])]
        r["cum_vs_first"], r["cum_vs_first_ci"] = interval(diffs)
        r["gain_vs_first"], r["gain_vs_first_ci"] = interval(gdiffs)
        r["worst_node_gain"] = min(a - b for run in r["runs"] for a, b in zip(run["after"], run["before"]))
    print(table(results, ["update", "split", "seeds", "cum_reward_mean", "cum_reward_ci", "cum_vs_first",
                          "cum_vs_first_ci", "gain_mean", "gain_ci", "gain_vs_first", "gain_vs_first_ci",
                          "worst_node_gain", "external_groups"]))
    RESULTS.mkdir(parents=True, exist_ok=True)
    plot(results, RESULTS / f"sapo{tag}.png")
    write_json(f"sapo{tag}", {"args": args, "results": results}, RESULTS)


if __name__ == "__main__":
    main()
