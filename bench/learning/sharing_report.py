"""The report of bench.learning.sharing: per-arm rows, paired differences by seed, the decision rules (its
docstring and docs/benchmarks/learning.md §13) and the figure."""

from __future__ import annotations

import itertools
import statistics

from bench.harness.arms import cells, compare
from bench.harness.output import pyplot, save_figure
from bench.harness.stats import fields

PAIRS = [("B", "A"), ("C", "A"), ("C", "D"), ("E", "A"), ("E", "B"), ("B", "RB"), ("C", "RC"), ("RB", "A"),
         ("RC", "D"), ("C", "RC3"), ("RC3", "RC")]


def hard_label(runs: list[dict]) -> str | None:
    """The task kind the untrained model solves least (the hard band), when there are several."""
    by = runs[0]["before_by_task"][0] if runs and runs[0]["before_by_task"] else {}
    return min(by, key=by.get) if len(by) > 1 else None


FIELDS = ["gain", "gain_hard", "cum_reward", "cum_above_floor", "gain_per_mtok_generated", "gain_per_mtok_trained",
          "tokens_generated", "tokens_trained", "groups_replayed", "informative_own", "informative_received",
          "external_groups", "s_per_node_round"]


DIFF_FIELDS = ("gain", "gain_hard", "cum_reward", "cum_above_floor", "gain_per_mtok_generated", "gain_per_mtok_trained",
               "tokens_trained")  # what a paired difference reports


def summarise(runs: list[dict], versus: str | None = None) -> tuple[list[dict], list[dict]]:
    """Per (update, arm, nodes): means and intervals over seeds; per update: paired differences between
    arms; with `versus`, every other update against that one, arm by arm (a mechanism against its base)."""
    hard = hard_label(runs)
    for r in runs:
        r["gain_hard"] = r["gain_by_task"].get(hard) if hard else None
    by = cells(runs, ("update", "arm", "nodes"))
    rows = []
    for (update, arm, nodes), rs in by.items():
        row = {"update": update, "arm": arm, "nodes": nodes, "seeds": len(rs),
               "worst_node_gain": min(g for r in rs.values() for g in r["node_gains"])}
        rows.append({**row, **fields(rs.values(), FIELDS)})
    diffs = []
    for update in dict.fromkeys(r["update"] for r in runs):
        for nodes in sorted({r["nodes"] for r in runs}):
            arms = [arm for (u, arm, n) in by if u == update and n == nodes]
            here = {"update": update, "nodes": nodes}
            diffs += compare(by, [((update, a, nodes), (update, b, nodes)) for a, b in PAIRS], DIFF_FIELDS,
                             label=lambda a, b: {**here, "pair": f"{a[1]} − {b[1]}"})
            sizes = sorted(n for (u, _, n) in by if u == update)
            # the swarm-size curve: each size against the smallest, and against the size before it, arm by arm
            for other in dict.fromkeys([sizes[0], *[n for n in sizes if n < nodes][-1:]]) if nodes != sizes[0] else ():
                diffs += compare(by, [((update, arm, nodes), (update, arm, other)) for arm in arms], DIFF_FIELDS,
                                 label=lambda a, b: {**here, "pair": f"{a[1]}: {a[2]} vs {b[2]} nodes"})
            if versus and update != versus:
                diffs += compare(by, [((update, arm, nodes), (versus, arm, nodes)) for arm in arms], DIFF_FIELDS,
                                 label=lambda a, b: {**here, "pair": f"{a[1]}: vs {versus}"})
    return rows, diffs


def verdicts(diffs: list[dict]) -> list[str]:
    """The decision rules (docs/benchmarks/learning.md §13), applied to held-out gain, per update."""
    out = []
    for update in dict.fromkeys(d["update"] for d in diffs):
        for nodes in sorted({d["nodes"] for d in diffs if d["update"] == update}):
            get = {d["pair"]: d for d in diffs if d["update"] == update and d["nodes"] == nodes}
            cd, ca, ba = get.get("C − D"), get.get("C − A"), get.get("B − A")
            if cd and ca and "gain" in cd and "gain" in ca:
                ok = cd["gain"] - cd["gain_ci"] > 0 and ca["gain"] >= -0.02
                out.append(f"{update} ({nodes} nodes): sharing saves compute: {'YES' if ok else 'no'} "
                           f"(C − D {cd['gain']:+.3f} ± {cd['gain_ci']:.3f}, C − A {ca['gain']:+.3f} ± {ca['gain_ci']:.3f})")
            for x, r in (("B", "RB"), ("C", "RC"), ("C", "RC3")):
                d = get.get(f"{x} − {r}")
                if d and "gain" in d:
                    out.append(f"{update} ({nodes} nodes): {x} beats replay at equal trained tokens ({x} > {r}): "
                               f"{_sign(d)} ({x} − {r} {d['gain']:+.3f} ± {d['gain_ci']:.3f}; trained tokens "
                               f"{d['tokens_trained']:+.0f} ± {d['tokens_trained_ci']:.0f} a node)")
            if ba and "gain" in ba:
                ok = ba["gain"] - ba["gain_ci"] > 0
                worse = ba["gain"] + ba["gain_ci"] < 0
                out.append(f"{update} ({nodes} nodes): SAPO's claim at equal compute (B > A): "
                           f"{'YES' if ok else 'no — B is worse' if worse else 'not shown'} "
                           f"(B − A {ba['gain']:+.3f} ± {ba['gain_ci']:.3f})")
    return out + growth_verdicts(diffs)


def _sign(d: dict) -> str:
    return "YES" if d["gain"] - d["gain_ci"] > 0 else "no — it is worse" if d["gain"] + d["gain_ci"] < 0 \
        else "not shown"


def growth_verdicts(diffs: list[dict]) -> list[str]:
    """The swarm-size rules (the docstring's §13G rules): largest − smallest size, and each doubling against the
    one before, per update and arm."""
    out = []
    for update, arm in dict.fromkeys((d["update"], d["pair"].split(":")[0]) for d in diffs if "nodes" in d["pair"]):
        steps = {tuple(int(x) for x in d["pair"].split(": ")[1].split(" nodes")[0].split(" vs ")): d for d in diffs
                 if d["update"] == update and d["pair"].startswith(f"{arm}: ") and "nodes" in d["pair"] and "gain" in d}
        if not steps:
            continue
        big, small = max(steps, key=lambda k: (k[0], -k[1]))
        d = steps[(big, small)]
        out.append(f"{update} arm {arm}: grows with the swarm ({big} − {small} nodes): "
                   f"{'YES' if d['gain'] - d['gain_ci'] > 0 else 'no'} ({d['gain']:+.3f} ± {d['gain_ci']:.3f})")
        chain = sorted(k for k in steps if k[1] == max([x for x in {j for _, j in steps} if x < k[0]], default=-1))
        for (n2, n1), (n3, _) in itertools.pairwise(chain):
            a, b = steps[(n2, n1)], steps[(n3, n2)]
            out.append(f"{update} arm {arm}: no flattening ({n1}→{n2}→{n3}): "
                       f"{'YES' if b['gain'] >= a['gain'] - a['gain_ci'] else 'no'} "
                       f"({n3} − {n2}: {b['gain']:+.3f}; {n2} − {n1}: {a['gain']:+.3f} ± {a['gain_ci']:.3f})")
    return out


def plot(runs: list[dict], rows: list[dict], diffs: list[dict], path) -> None:
    plt = pyplot()

    updates = list(dict.fromkeys(r["update"] for r in runs))
    sizes = sorted({r["nodes"] for r in runs})
    fig, axes = plt.subplots(1, len(updates) + 1, figsize=(5.5 * (len(updates) + 1), 4.2), squeeze=False)
    for ax, update in zip(axes[0][:-1], updates):
        if len(sizes) > 1:  # the swarm-size curve
            for arm in dict.fromkeys(r["arm"] for r in rows if r["update"] == update):
                pts = sorted((r["nodes"], r["gain"], r["gain_ci"]) for r in rows if r["update"] == update and r["arm"] == arm)
                ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts], marker="o",
                            capsize=4, label=f"arm {arm}")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("nodes in the swarm")
            ax.set_ylabel("held-out gain per node")
        else:
            for arm in dict.fromkeys(r["arm"] for r in runs if r["update"] == update):
                curves = [c for r in runs if r["update"] == update and r["arm"] == arm for c in r["curves"]]
                n = min(len(c) for c in curves)
                ax.plot(range(n), [statistics.fmean(c[t] for c in curves) for t in range(n)], label=arm)
            ax.set_xlabel("round")
            ax.set_ylabel("mean reward on own rollouts")
        ax.set_title(update)
        ax.legend(fontsize=8)
    ax = axes[0][-1]
    shown = [d for d in diffs if "gain" in d and (d["nodes"] == max(sizes) if len(sizes) == 1 else "nodes" in d["pair"])]
    ax.errorbar(range(len(shown)), [d["gain"] for d in shown], yerr=[d["gain_ci"] for d in shown], fmt="o", capsize=4)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(shown)), [f"{d['pair']}\n{d['update']}" for d in shown], fontsize=7)
    ax.set_title("held-out gain, paired difference (95 % CI)")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
