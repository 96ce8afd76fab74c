"""Does sharing pay? A swarm node against a node alone, at equal compute, paired by seed.

Arms (I own + J peers' groups trained per round, G groups generated per round, per node):

  A  8 / 0, generate 8    alone
  B  4 / 4, generate 8    SAPO at equal generation (8 groups a step, as A; A drops its own groups of equal
                          rewards, so under a binary reward B trains ≈ 1.8× A's tokens)
  C  4 / 4, generate 4    half the generation; peers' groups fill the step
  D  4 / 0, generate 4    alone at half the generation
  E  B, and node k draws only difficulty band k (mod the number of bands); every node is evaluated
     on all bands (tasks.eval_datasets)
  RB the node alone at A's generation (8 / 0, generate 8), training as many completion tokens each round as
     node k of B's run of that seed did, by replaying its own earlier informative groups (select.replay_tokens:
     the same loss, each replayed row weighed against μ, the policy that sampled it): the solo control at
     equal generated *and* equal trained tokens
  RC likewise at D's generation (4 / 0, generate 4), matched to C's run
  RC3 RC with each own group replayed up to 3 times in one step (select.replay_repeat: 3): in early rounds RC has
     too few groups of its own to reach a large budget once each (docs/benchmarks/learning.md §13I)

Custom arms: `--arm NAME=I/J/G` (append `/s` for specialties). Every arm of a seed runs the same
nodes on the same task streams (tasks.seed = 100·seed + k) and the same held-out items, on the
in-memory twin of the transport (swarm.exchange.twin: the real receive rules and fan-in), one process and
one torch thread per swarm; `--jobs` runs swarms side by side. `--twin rounds` (the default) delivers by round —
a group published in round r is visible to every peer from round r + `--delay` (default 1) — on a virtual clock
of `--round-s` seconds a round, so every arm reproduces to the last digit; `--twin clock` is the wall-clock twin
of the earlier sections, where an arm with peers does not reproduce (bench/harness/swarm.py). Each run records
its twin. An R arm runs after the arm it is matched to, from that run's per-round trained tokens.

Per run, mean over its nodes: held-out exact-match gain (after − before), overall and per task kind
(the hard band separately), cumulative reward (Σ of a node's mean reward on its own rollouts) and
that sum above the untrained floor (rounds × the node's held-out accuracy before training on the
kinds it trains on; its mean verifier score under partial credit), gain per million generated and
per million trained tokens, the share of informative groups (rewards differ) among a node's own
and among those it received, seconds per node-round. Paired differences (95 % t-intervals over
seeds) for B − A, C − A, C − D, E − A, E − B, and the decision rules of docs/benchmarks/learning.md §13:

  sharing saves compute   C − D > 0 with an interval that excludes 0, and C − A ≥ −0.02
  SAPO at equal compute   B − A > 0 with an interval that excludes 0
  beats replay            B − RB > 0 (equal generated and trained tokens) with an interval that excludes 0;
                          likewise C − RC

Imitation (`train.imitate: 1`, losses/imitation.py; rules fixed before its runs, docs/benchmarks/learning.md §13F),
updates f-tis, f-tis+imit (peers' above-mean rows imitated) and f-tis+imitall (every above-mean row,
own ones too), arms C and D, tag _imitation, paired by seed and arm across updates:
  imitation makes peers' groups worth more    C[f-tis+imit] − C[f-tis] > 0, interval excluding 0
  sharing pays under imitation, at equal loss  C[f-tis+imitall] − D[f-tis+imitall] > 0, likewise
  a peer's answers beyond one's own            C[f-tis+imit] − D[f-tis+imitall] > 0, likewise
and, added after those came out and before their runs, arms A and B (equal generation):
  SAPO's comparison under imitation            B[f-tis+imitall] − A[f-tis+imitall] > 0, likewise
  imitation at equal generation                B[f-tis+imit] − B[f-tis] > 0, likewise

`--device cuda` places every node's model on the GPU (`train.device`: training, scoring and generation);
`--jobs K` then runs K swarms in K processes on that one GPU. With examples/papers/sapo-smollm2.yaml this is the
real-LM benchmark (SmolLM2-135M-Instruct, LoRA; docs/benchmarks/learning.md §13H); on a CPU it runs end to end at 2 rounds
(tests/integration/test_sharing_real_lm.py).

`--sizes 1 2 4 8` runs the given arms (default C) with that many nodes: the swarm-size curve.

Steps that take what the swarm offers (docs/benchmarks/learning.md §13G; rules fixed before its runs): arm C (4 own groups
generated a round) at 2 / 4 / 8 / 16 nodes, updates f-tis (J = 4 peers' groups a step, drawn at random) and
f-tis+grow (`select.external_tokens: 1536`, about 16 peers' groups of ≈ 95 completion tokens, in place of J; and
`select.prefer: useful`), seeds 0–7 (fewer where time ran out, stated as such), tag _grow; per-node held-out gain,
paired by seed:
  grows with the swarm    gain(16 nodes) − gain(2 nodes) > 0 with an interval excluding 0, per update
  no flattening           for each run sizes n, 2n, 4n: gain(4n) − gain(2n) ≥ [gain(2n) − gain(n)] − the
                          half-width of that earlier interval, per update
  the options pay         f-tis+grow − f-tis > 0 with an interval excluding 0 at 16 nodes; only then is
                          f-tis+grow proposed as a default (otherwise both options stay off)

`--hivemind` runs each swarm as `swarm local` instead: real node processes, a real hivemind DHT and
libp2p streams on 127.0.0.1, asynchronous rounds (`swarm.wait_s: 0`) — to check that the in-memory
twin does not flatter (gain and cumulative reward only; no per-kind breakdown before training).
Runs are appended to bench/results/learning/sharing<tag>.jsonl as they finish (an interrupted invocation
resumes where it stopped); the table goes to sharing<tag>.json and the figure to sharing<tag>.png. Each run line
records its `build` (bench.harness.models.build_of: the model's weights hash, torch, transformers): a resumed
invocation refuses, with one line and exit status 2, to add runs on other weights to a runs file, and names any
seed whose runs began from different untrained scores (how two builds show in lines older than `build`).

    python -m bench.learning.sharing --config examples/papers/sapo.yaml --arms A B C D --update "f-tis=loss={name: f-tis}" \\
        --seeds 0 1 2 3 4 5 6 7 --rounds 30 --tag _partial
    python -m bench.learning.sharing --seeds 0 1 2 3 4 5 6 7 --rounds 30 --jobs 2        # the binary, harder regime
    python -m bench.learning.sharing --arms C --sizes 1 2 4 8 --update "f-tis=loss={name: f-tis}" --tag _sizes
    python -m bench.learning.sharing --config examples/papers/sapo-smollm2.yaml --arms A B C D --update f-tis= \\
        --seeds 0 1 2 3 4 5 6 7 --rounds 15 --device cuda --jobs 8 --tag _smollm2       # SmolLM2 on one GPU
    python -m bench.learning.sharing --arms C --sizes 2 4 8 16 --update "f-tis=loss={name: f-tis}" \\
        --update "f-tis+grow=loss={name: f-tis};select.external_tokens=1536;select.prefer=useful" --versus f-tis --tag _grow
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from bench.harness.models import mixed_build, unmatched_before
from bench.harness.options import parse_sets
from bench.harness.output import load_jsonl, results_dir, table, write_json
from bench.harness.pool import run_jobs
from bench.harness.stats import mean_of
from bench.learning.sharing_report import plot, summarise, verdicts

RESULTS = results_dir("learning")

ARMS = {"A": (8, 0, 8, False), "B": (4, 4, 8, False), "C": (4, 4, 4, False), "D": (4, 0, 4, False),
        "E": (4, 4, 8, True), "RB": (8, 0, 8, False), "RC": (4, 0, 4, False), "RC3": (4, 0, 4, False)}
REPLAY_OF = {"RB": "B", "RC": "C", "RC3": "C"}  # an R arm → the swarm arm whose trained tokens it matches
REPEAT = {"RC3": 3}  # an R arm → select.replay_repeat (1 when not named): a group replayed up to this often a step
DEFAULT_UPDATES = ["sapo=", "f-tis=loss={name: f-tis}"]


def parse_arm(text: str) -> tuple[str, tuple[int, int, int, bool]]:
    if text in ARMS:
        return text, ARMS[text]
    name, _, spec = text.partition("=")
    parts = spec.split("/")
    if not name or len(parts) not in (3, 4) or not all(p.isdigit() for p in parts[:3]) or parts[3:] not in ([], ["s"]):
        raise SystemExit(f"bench.learning.sharing: bad arm {text!r}: expected A..E or NAME=I/J/G[/s]")
    return name, (int(parts[0]), int(parts[1]), int(parts[2]), parts[3:] == ["s"])


def node_overrides(config: str, nodes: int, special: bool) -> list[dict]:
    """Per-node overrides: with specialties node k trains on band k (mod bands), evaluated on all."""
    if not special:
        return [{} for _ in range(nodes)]
    from node.config import load_config

    bands = [s.model_dump() for s in load_config(config, {}).tasks.datasets]
    return [{"tasks.datasets": [bands[k % len(bands)]], "tasks.eval_datasets": bands} for k in range(nodes)]


def trained_labels(config: str, over: dict) -> list[str]:
    """Labels (node.tasks.source.task_label) of the task kinds a node with these overrides trains on."""
    from node.config import load_config
    from node.tasks.source import task_label
    from protocols.records import TaskRef

    tasks = load_config(config, {}).tasks
    mix = tasks.eval_datasets or tasks.datasets
    multi = {s.name for s in mix if sum(o.name == s.name for o in mix) > 1}
    own = over.get("tasks.datasets") or [s.model_dump() for s in tasks.datasets]
    return [task_label(TaskRef(s["name"], s.get("config", {}), 0, 0), multi) for s in own]


def run_one(job: dict) -> dict:
    """One swarm for one (update, arm, nodes, seed): the run's summary, per node and averaged."""
    from bench.harness.swarm import run_swarm

    i, j, g, special = job["arm_spec"]
    per_node = node_overrides(job["config"], job["nodes"], special)
    over = [{**job["overrides"], **p} for p in per_node]
    started = time.perf_counter()
    run = run_swarm([job["config"]] * job["nodes"], i, j, job["seed"], job["rounds"], over, generate=g,
                    twin=job["twin"], delay=job["delay"], round_s=job["round_s"], replay_to=job.get("replay_to"),
                    progress=f"{job['update']} {job['arm']} {job['nodes']} nodes seed {job['seed']}")
    seconds = time.perf_counter() - started
    exact = over[0].get("tasks.reward", None) == "exact" or _config_reward(job["config"]) == "exact"
    floors, nodes = [], range(job["nodes"])
    for k in nodes:
        labels = trained_labels(job["config"], per_node[k])
        by = run["before_by_task"][k]
        base = statistics.fmean(by[x] for x in labels) if by and all(x in by for x in labels) else \
            run["before"][k] if exact else run["score_before"][k]
        floors.append(base * job["rounds"])
    gains = [a - b for a, b in zip(run["after"], run["before"])]
    kinds = sorted(run["before_by_task"][0])
    out = {k: job[k] for k in ("update", "arm", "nodes", "seed", "rounds")}
    out.update(
        build=job.get("build"), special=special,
        twin=run["twin"], delay=run["delay"], virtual_round_s=run["virtual_round_s"],
        trained_by_round=run["trained_by_round"],
        groups_replayed=statistics.fmean(run["groups_replayed"]),
        gain=statistics.fmean(gains), node_gains=gains,
        gain_by_task={x: statistics.fmean(a[x] - b[x] for a, b in zip(run["after_by_task"], run["before_by_task"]))
                      for x in kinds},
        cum_reward=run["cum_reward"],
        cum_above_floor=statistics.fmean(sum(c) - f for c, f in zip(run["curves"], floors)),
        gain_per_mtok_generated=statistics.fmean(1e6 * x / max(t, 1) for x, t in zip(gains, run["tokens_generated"])),
        gain_per_mtok_trained=statistics.fmean(1e6 * x / max(t, 1) for x, t in zip(gains, run["tokens_trained"])),
        tokens_generated=statistics.fmean(run["tokens_generated"]),
        tokens_trained=statistics.fmean(run["tokens_trained"]),
        groups_received=statistics.fmean(run["groups_received"]),
        informative_own=sum(run["groups_informative"]) / max(1, sum(run["generated_groups"])),
        informative_received=(sum(run["groups_received_informative"]) / sum(run["groups_received"])
                              if sum(run["groups_received"]) else None),
        external_groups=statistics.fmean(run["external_groups"]),
        external_weight=mean_of(run["external_weight"]),
        s_per_node_round=statistics.fmean(run["round_s"]) / job["rounds"],
        seconds=round(seconds, 1), before=run["before"], after=run["after"],
        before_by_task=run["before_by_task"], after_by_task=run["after_by_task"],
        curves=run["curves"])
    return out


def run_hivemind(job: dict) -> dict:
    """One swarm as `swarm local` processes over real hivemind peers: node k gets seed and tasks.seed
    100·seed + k, as run_swarm gives it."""
    import os
    import subprocess
    import tempfile
    from pathlib import Path

    import yaml

    from node.round.record import read_records

    i, j, g, special = job["arm_spec"]
    if special:
        raise SystemExit("bench.learning.sharing: --hivemind runs arms without specialties")
    sets = {"select.local_groups": i,
            "select.external_groups": j, "generation.prompts_per_round": g, "eval.every": job["rounds"],
            "checkpoint.every": 10**6, "torch_threads": 1, "swarm.wait_s": 0, **job["overrides"]}
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={yaml.safe_dump(v, default_flow_style=True).strip()}")]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        config = yaml.safe_load(Path(job["config"]).read_text())  # swarm local gives node k seed + k, tasks.seed + k
        config["seed"] = 100 * job["seed"]
        config.setdefault("tasks", {})["seed"] = 100 * job["seed"]
        path = Path(tmp) / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        proc = subprocess.run([sys.executable, "-m", "ops.cli", "local", "--nodes", str(job["nodes"]), "--config",
                               str(path), "--rounds", str(job["rounds"]), "--out", f"{tmp}/run", *args],
                              capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        if proc.returncode != 0:
            raise RuntimeError(f"swarm local failed ({proc.returncode}): {proc.stdout[-2000:]}")
        run = Path(tmp) / "run"
        rows = [read_records(run / d / "metrics.jsonl") for d in sorted(os.listdir(run))
                if (run / d / "metrics.jsonl").is_file()]
    before = [r[0].eval.eval_accuracy_before for r in rows]
    after = [[m for m in r if m.eval.eval_accuracy is not None][-1].eval.eval_accuracy for r in rows]
    gains = [a - b for a, b in zip(after, before)]
    out = {k: job[k] for k in ("update", "arm", "nodes", "seed", "rounds")}
    out.update(transport="hivemind", twin="hivemind", gain=statistics.fmean(gains), node_gains=gains, gain_by_task={},
               cum_reward=statistics.fmean(sum(m.generation.reward_mean for m in r) for r in rows),
               external_groups=statistics.fmean(sum(m.step.groups_external for m in r) for r in rows),
               s_per_node_round=statistics.fmean(m.round_s for r in rows for m in r),
               seconds=round(time.perf_counter() - started, 1), before=before, after=after, before_by_task=[{}],
               curves=[[m.generation.reward_mean for m in r] for r in rows])
    return out


def model_build(config: str, sets: dict) -> dict:
    """bench.harness.models.build_of the model a run's nodes run (the config's, or the one its overrides set)."""
    from bench.harness.models import build_of
    from node.config import load_config

    return build_of(sets.get("model.spec") or load_config(config, {}).model.spec)


def _config_reward(config: str) -> str:
    from node.config import load_config

    return load_config(config, {}).tasks.reward


def make_jobs(args, updates: dict, arms: dict, runs: list[dict], twin: str, replays: bool) -> list[dict]:
    """The jobs not yet in `runs`: the arms without replay, or (`replays`) the R arms, each with its matched run's
    trained tokens per node and round (an R arm whose matched run is missing is left out, with a line)."""
    key = lambda r: (r["update"], r["arm"], r["nodes"], r["seed"], r["rounds"], twin_of(r))  # noqa: E731
    done = {key(r): r for r in runs}
    jobs = []
    for s in args.seeds:
        for u, over in updates.items():
            for a, spec in arms.items():
                for n in args.sizes or [args.nodes]:
                    if (a in REPLAY_OF) != replays or (u, a, n, s, args.rounds, twin) in done:
                        continue
                    job = {"config": args.config, "update": u, "overrides": over, "arm": a, "arm_spec": spec,
                           "nodes": n, "seed": s, "rounds": args.rounds, "twin": twin, "delay": args.delay,
                           "round_s": args.round_s}
                    if a in REPLAY_OF:
                        matched = done.get((u, REPLAY_OF[a], n, s, args.rounds, twin))
                        if matched is None or "trained_by_round" not in matched:
                            print(f"{u} {a} n={n} seed {s}: no run of {REPLAY_OF[a]} to match; left out",
                                  file=sys.stderr)
                            continue
                        job["replay_to"] = matched["trained_by_round"]
                        if a in REPEAT:
                            job["overrides"] = {**over, "select.replay_repeat": REPEAT[a]}
                    jobs.append(job)
    return jobs


def workers(args, jobs: list[dict]) -> int:
    """--jobs, fewer where the biggest job's memory estimate (bench.harness.memory) leaves no room for that many;
    exit 2 with one line when not even one fits."""
    from bench.harness.memory import fits, job_bytes

    if not jobs or args.hivemind:
        return args.jobs
    big = max(jobs, key=lambda j: j["nodes"])
    n, why = fits(job_bytes(args.config, big["overrides"], big["nodes"]), args.jobs)
    if why:
        print(f"bench.learning.sharing: {why}", file=sys.stderr)
        sys.exit(2)
    if n < args.jobs:
        print(f"bench.learning.sharing: {n} job(s) side by side, not {args.jobs}: the memory of more would not fit",
              file=sys.stderr)
    return n


def twin_of(run: dict) -> str:
    """rounds, clock or hivemind (runs made before the twin was recorded ran on the clock or over hivemind)."""
    return run.get("twin") or ("hivemind" if run.get("transport") == "hivemind" else "clock")


def describe(r: dict) -> str:
    return f"{r['update']} {r['arm']} n={r['nodes']} seed {r['seed']}: gain {r['gain']:+.3f} cum {r['cum_reward']:.2f} " \
           f"({r['seconds']:.0f} s)"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="examples/papers/sapo-binary.yaml")
    ap.add_argument("--arms", nargs="+", default=None, help="A B C D E, or NAME=I/J/G[/s] (default A–E; C with --sizes)")
    ap.add_argument("--seeds", nargs="+", type=int, default=list(range(8)))
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--sizes", nargs="+", type=int, help="swarm sizes to run (the swarm-size curve)")
    ap.add_argument("--update", action="append", default=None, metavar="NAME=K=V;K=V",
                    help="an update with its config overrides (default: sapo= and f-tis)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="overrides for every run")
    ap.add_argument("--jobs", type=int, default=1, help="swarms run side by side (one core each, or sharing one GPU)")
    ap.add_argument("--device", help="train.device of every node: cpu, cuda, cuda:N (default: the config's)")
    ap.add_argument("--tag", default="")
    ap.add_argument("--results", default=None, help="folder of the results files (default: RESULTS)")
    ap.add_argument("--versus", metavar="UPDATE", help="also pair every other update against this one, arm by arm")
    ap.add_argument("--twin", choices=["rounds", "clock"], default="rounds",
                    help="delivery by round on a virtual clock (reproducible; default) or on wall-clock time")
    ap.add_argument("--delay", type=int, default=1, help="--twin rounds: rounds from publish to visible (default 1)")
    ap.add_argument("--round-s", type=float, default=10.0, help="--twin rounds: swarm seconds a round stands for")
    ap.add_argument("--hivemind", action="store_true", help="run each swarm over real hivemind peers (swarm local)")
    ap.add_argument("--report", action="store_true", help="no runs: table and figure from the tag's runs file")
    args = ap.parse_args(argv)
    arms = dict(parse_arm(a) for a in (args.arms or (["C"] if args.sizes else list(ARMS))))
    common = {**parse_sets(args.set), **({"train.device": args.device} if args.device else {})}
    updates = {}
    for item in args.update or DEFAULT_UPDATES:
        name, _, rest = item.partition("=")
        updates[name] = {**common, **parse_sets(kv for kv in rest.split(";") if kv)}
    twin = "hivemind" if args.hivemind else args.twin
    if args.hivemind and any(a in REPLAY_OF for a in arms):
        raise SystemExit("bench.learning.sharing: the R arms run on the twin only, not with --hivemind")
    out_dir = Path(args.results) if args.results else RESULTS
    sink = out_dir / f"sharing{args.tag}.jsonl"
    runs = load_jsonl(sink)
    if not args.report:
        for build in {b["model"]: b for b in (model_build(args.config, over) for over in updates.values())}.values():
            refusal, warning = mixed_build(runs, build)
            if refusal:
                print(f"bench.learning.sharing: {refusal}", file=sys.stderr)
                sys.exit(2)
            if warning:
                print(f"bench.learning.sharing: {warning}", file=sys.stderr)
        for phase in (False, True):  # an R arm needs the trained tokens of the run it is matched to
            jobs = [{**j, "build": model_build(args.config, j["overrides"])}
                    for j in make_jobs(args, updates, arms, runs, twin, replays=phase)]
            runs += run_jobs(run_hivemind if args.hivemind else run_one, jobs, sink, workers(args, jobs), describe)
        wanted = {(u, a, n, s) for u in updates for a in arms for n in (args.sizes or [args.nodes]) for s in args.seeds}
        runs = [r for r in runs if (r["update"], r["arm"], r["nodes"], r["seed"]) in wanted
                and r["rounds"] == args.rounds and twin_of(r) == twin]
    unmatched = unmatched_before(runs)
    for line in unmatched:
        print(f"bench.learning.sharing: {line}", file=sys.stderr)
    rows, diffs = summarise(runs, args.versus)
    print(table(rows, ["update", "arm", "nodes", "seeds", "gain", "gain_ci", "gain_hard", "gain_hard_ci", "cum_reward",
                       "cum_above_floor", "gain_per_mtok_generated", "gain_per_mtok_trained", "informative_own",
                       "informative_received", "worst_node_gain", "s_per_node_round"]))
    print(table(diffs, ["update", "nodes", "pair", "seeds", "gain", "gain_ci", "gain_positive", "gain_hard",
                        "gain_hard_ci", "cum_above_floor", "cum_above_floor_ci", "cum_above_floor_positive"]))
    for line in verdicts(diffs):
        print(line)
    plot(runs, rows, diffs, out_dir / f"sharing{args.tag}.png")
    write_json(f"sharing{args.tag}", {"args": vars(args), "rows": rows, "diffs": diffs, "verdicts": verdicts(diffs),
                                      "builds": sorted({json.dumps(r["build"], sort_keys=True) for r in runs
                                                        if r.get("build")}), "unmatched_before": unmatched,
                                      "runs": [{k: v for k, v in r.items() if k != "curves"} for r in runs]}, out_dir)


if __name__ == "__main__":
    main()
