"""Does a node gain from a peer that is a different model? Heterogeneous pairs against solo runs.

Two pairs, both on spell_backward (3–6 letter words), where both models have headroom:
  spell    `lab-spell` (≈ one character per token) and `lab-spell-wide` (a coarser BPE, another
           seed), both warm-started to ≈ 35–41 % sampled exact match; each from `examples/lab-solo.yaml`
           (B = 8 prompts × G = 8, lr 1e-4, 40 rounds), J = 4 of the other model's groups in pairs.
  smollm2  `lab-spell` (examples/hetero/lab.yaml: 8 own groups × 8, J = 4) and SmolLM2-135M-Instruct
           with LoRA (examples/hetero/smollm2.yaml: 4 own groups × 4, J = 4): a 49k-vocabulary chat
           model that almost never spells a word exactly backwards (held-out exact match ≈ 0) but earns
           partial credit per letter (reward ≈ 0.07), so its `score` (mean verifier score) is the
           measure that can move. Its rounds take ≈ 30 s here: use few rounds and seeds.
Each node's rows from the other tokenizer are re-tokenised and weighted by the chunk ratio (pieces
of text both tokenizations end at; `NAME/sequence`: the length-normalised ratio of the whole
completion, docs/ARCHITECTURE.md §6).

    solo    own groups only (J = 0): each node alone on its task stream
    pair    the same own groups (the same stream) + J of the other model's groups, per loss

Per seed the two nodes' task streams (tasks.seed) are the same in solo and pair runs, so a node's
held-out gain in a pair run is paired with its gain in the solo run of the same seed: Δ = gain(pair)
− gain(solo), mean over seeds with a 95 % t-interval (Δ score: the same for the mean verifier score).
The solo runs use `grpo` with the sequence mean (`norm: seq`, the normalisation of the FIS family and
GEPO's row mean; on own rows at one epoch every loss here has ratio ≈ 1 to the sampler and GEPO's
group weight is ≈ 1), so a pair run differs from its solo run only in the peer's rows. `ext w` is
the mean IS weight on the peer's rows (rounds that used any), from the loss's `is_weight_external`;
`w_share` the share of those weights ≥ 0.1 (not negligible); `filtered` the rows an f-* filter zeroed.

    python -m bench.learning.hetero [--losses nois f-nois tis gepo f-tis tis/sequence] [--seeds 0 1 2] [--rounds 40]
    python -m bench.learning.hetero --pair smollm2 --losses nois f-nois gepo f-tis tis --rounds 8   # docs/benchmarks/learning.md §12B

The nodes run in one process on the in-memory twin of the exchange (bench/learning/sapo.py); the models
are built on first use (about 1–5 minutes each). Each run is appended to bench/results/learning/hetero[-smollm2].jsonl
as it ends (bench/harness/arms.py: an interrupted invocation resumes; `--jobs` runs side by side); the table goes to
hetero[-smollm2].json and the figure to .png.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from bench.harness.arms import cells, run_arms
from bench.harness.output import pyplot, results_dir, save_figure, table, write_json
from bench.harness.stats import interval
from bench.harness.swarm import run_swarm

RESULTS = results_dir("learning")

# per pair: the node's config, its own groups per round, and overrides (held-out set) per node
PAIRS = {
    "spell": {"models": ("lab-spell", "lab-spell-wide"), "configs": ("examples/lab-solo.yaml",) * 2, "own": (8, 8),
              "over": ({"tasks.eval_size": 256, "eval.samples": 4},) * 2},
    "smollm2": {"models": ("lab-spell", "smollm2-135m"), "configs": ("examples/hetero/lab.yaml", "examples/hetero/smollm2.yaml"),
                "own": (8, 4), "over": ({"tasks.eval_size": 256, "eval.samples": 4}, {"tasks.eval_size": 48, "eval.samples": 2})},
}


def configs(pair: dict, tmp: Path, loss: str) -> list[str]:
    """One config per node: its base file with its model and its loss (with the loss's defaults) swapped."""
    out = []
    for k, (spec, base) in enumerate(zip(pair["models"], pair["configs"])):
        cfg = yaml.safe_load(Path(base).read_text())
        # GRPO with the sequence mean the FIS family (and GEPO's row mean) uses: the solo runs differ from
        # the pair runs only in the peer's rows (on own rows at one epoch every loss here has ratio ≈ 1)
        cfg["loss"] = {"name": loss, "norm": "seq"} if loss == "grpo" else {"name": loss}
        path = tmp / f"{k}-{spec}-{loss}.yaml"
        path.write_text(yaml.safe_dump({**cfg, "model": {**cfg["model"], "spec": spec}}))
        out.append(str(path))
    return out


def plot(rows: list[dict], models: tuple[str, str], path: Path, key: str) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 4.2))
    losses = list(dict.fromkeys(r["loss"] for r in rows))
    for k, spec in enumerate(models):
        pts = [r for r in rows if r["node"] == spec]
        xs = [losses.index(r["loss"]) + (k - 0.5) * 0.2 for r in pts]
        ax.errorbar(xs, [r[key] for r in pts], yerr=[r[f"{key}_ci"] for r in pts], fmt="o", capsize=4, label=spec)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(losses)), losses)
    what = "accuracy" if key == "delta" else "mean score"
    ax.set(title=f"held-out {what} gain in the pair − gain alone (95 % CI over seeds)", ylabel=f"Δ {what}")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def run_one(job: dict) -> dict:
    """One pair run (or the solo run) of one seed: run_swarm's summary with the job's names and its wall time."""
    pair, name = PAIRS[job["pair"]], job["name"]
    loss, _, scale = name.partition("/")  # "tis/sequence": tis with the whole-completion ratio
    own, j = list(pair["own"]), 0 if name == "solo" else job["external"]
    # a node generates only its own prompts in every run, so its task stream (round × own + i) is the same
    over = [{**o, "generation.prompts_per_round": n, "train.cross_tokenizer": scale or "chunks"}
            for o, n in zip(pair["over"], own)]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        paths = configs(pair, Path(tmp), job["solo_loss"] if name == "solo" else loss)
        run = run_swarm(paths, own, [j, j], job["seed"], job["rounds"], over)
    return {**job, **run, "seconds": round(time.perf_counter() - started, 1)}


def describe(run: dict) -> str:
    gains = [a - b for a, b in zip(run["after"], run["before"])]
    scores = [a - b for a, b in zip(run["score_after"], run["score_before"])]
    return (f"{run['name']:6s} seed {run['seed']}: gains {' '.join(f'{g:+.3f}' for g in gains)}, "
            f"score gains {' '.join(f'{g:+.3f}' for g in scores)}, peer groups {run['external_groups']}, "
            f"ext w {run['external_weight']}, w ≥ 0.1 {run['external_share']}, filtered {run['filtered']} "
            f"({run['seconds']:.0f} s)")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", choices=sorted(PAIRS), default="spell")
    ap.add_argument("--losses", nargs="+", default=["nois", "f-nois", "tis", "gepo", "f-tis", "tis/sequence"],
                    help="NAME or NAME/sequence (the whole-completion ratio instead of chunks)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--external", type=int, default=4, help="J: the peer's groups per step in pair runs")
    ap.add_argument("--solo-loss", default="grpo",
                    help="the solo runs' loss (grpo: with the sequence mean); e.g. gepo with --losses gepo "
                         "separates GEPO's own reweighting from the peer's rows")
    ap.add_argument("--jobs", type=int, default=1, help="runs side by side (one core each)")
    args = ap.parse_args(argv)
    pair, t0 = PAIRS[args.pair], time.perf_counter()
    own, models = list(pair["own"]), pair["models"]
    tag = ("" if args.pair == "spell" else f"-{args.pair}") + ("" if args.solo_loss == "grpo" else f"-solo-{args.solo_loss}")
    jobs = [{"pair": args.pair, "name": name, "seed": seed, "rounds": args.rounds, "external": args.external,
             "solo_loss": args.solo_loss} for name in ["solo", *args.losses] for seed in args.seeds]
    done = run_arms(run_one, jobs, RESULTS / f"hetero{tag}.jsonl", args.jobs, describe,
                    key=("pair", "name", "seed", "rounds", "external", "solo_loss"))
    by = cells(done, ("pair", "name", "rounds", "external", "solo_loss"))
    runs = {name: [by[(args.pair, name, args.rounds, args.external, args.solo_loss)][s] for s in args.seeds]
            for name in ["solo", *args.losses]}
    rows = []
    for name in args.losses:
        for k, spec in enumerate(models):
            solo = [r["after"][k] - r["before"][k] for r in runs["solo"]]
            pair_gain = [r["after"][k] - r["before"][k] for r in runs[name]]
            solo_s = [r["score_after"][k] - r["score_before"][k] for r in runs["solo"]]
            pair_s = [r["score_after"][k] - r["score_before"][k] for r in runs[name]]
            (d, dh), (g, gh) = interval([p - s for p, s in zip(pair_gain, solo)]), interval(pair_gain)
            ds, dsh = interval([p - s for p, s in zip(pair_s, solo_s)])
            weights = [r["external_weight"][k] for r in runs[name] if r["external_weight"][k] is not None]
            shares = [r["external_share"][k] for r in runs[name] if r["external_share"][k] is not None]
            filtered = [r["filtered"][k] for r in runs[name] if r["filtered"][k] is not None]
            rows.append({"loss": name, "node": spec, "gain_solo": statistics.fmean(solo), "gain_pair": g,
                         "gain_pair_ci": gh, "delta": d, "delta_ci": dh, "delta_score": ds, "delta_score_ci": dsh,
                         "per_seed_delta": " ".join(f"{p - s:+.3f}" for p, s in zip(pair_gain, solo)),
                         "peer_groups": statistics.fmean(r["external_groups"][k] for r in runs[name]),
                         "ext_w": statistics.fmean(weights) if weights else float("nan"),
                         "w_share": statistics.fmean(shares) if shares else float("nan"),
                         "filtered": statistics.fmean(filtered) if filtered else float("nan")})
    print(f"\n== {' + '.join(models)}: {own} own (+ {args.external} peer's) groups × {args.rounds} rounds, "
          f"seeds {args.seeds}; Δ = pair − solo ({args.solo_loss}) gain, 95 % t-interval")
    print(table(rows, list(rows[0])))
    RESULTS.mkdir(parents=True, exist_ok=True)
    plot(rows, models, RESULTS / f"hetero{tag}.png", "delta" if args.pair == "spell" else "delta_score")
    path = write_json(f"hetero{tag}", {"args": vars(args), "rows": rows, "runs": runs,
                                       "seconds": time.perf_counter() - t0}, RESULTS)
    print(f"\nwrote {path} and {RESULTS / f'hetero{tag}.png'} in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
