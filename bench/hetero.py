"""Does a node gain from a peer that is a different model? Heterogeneous pairs against solo runs.

Two lab models with different tokenizers learn the same task (spell_backward, 3–6 letters):
`lab-spell` (≈ one character per token) and `lab-spell-wide` (a coarser BPE, another seed), both
warm-started to ≈ 35 % sampled exact match, so both have headroom. Node 0 runs one, node 1 the
other, from `examples/lab-solo.yaml` (B = 8 prompts × G = 8, lr 1e-4, 40 rounds); each node's
rows from the other tokenizer are re-tokenised and weighted by the chunk ratio (pieces of text
both tokenizations end at; `NAME/sequence`: the length-normalised ratio of the whole completion,
docs/ARCHITECTURE.md §6).

    solo    I = 8 own groups, J = 0: each node alone on its task stream
    pair    I = 8 own groups (the same stream) + J = 4 of the other model's groups, per loss

Per seed the two nodes' task streams (tasks.seed) are the same in solo and pair runs, so a node's
held-out gain in a pair run is paired with its gain in the solo run of the same seed: Δ = gain(pair)
− gain(solo), mean over seeds with a 95 % t-interval. The solo runs use `grpo` (on own rows at one
epoch every loss here has ratio value 1 to the sampler; GEPO's group weight is ≈ 1). `ext w` is the
mean IS weight on the peer's rows (rounds that used any), from the loss's `is_weight_external`;
`w_share` the share of those weights ≥ 0.1 (not negligible); `filtered` the rows an f-* filter zeroed.

    python -m bench.hetero [--losses nois tis gepo f-tis tis/sequence f-tis/sequence] [--seeds 0 1 2] [--rounds 40]

The nodes run in one process on the in-memory twin of the exchange (bench/sapo.py); both
models are built on first use (about 2 minutes each). Writes bench/results/hetero.{json,png}.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from bench.common import RESULTS, interval, table, write_json
from bench.sapo import run_swarm

MODELS = ("lab-spell", "lab-spell-wide")


def configs(base: str, tmp: Path, loss: str | None) -> list[str]:
    """One config per model: the base file with its model (and, unless None, its loss with the loss's defaults) swapped."""
    cfg = yaml.safe_load(Path(base).read_text())
    if loss is not None:
        cfg["loss"] = {"name": loss}
    out = []
    for spec in MODELS:
        path = tmp / f"{spec}-{loss}.yaml"
        path.write_text(yaml.safe_dump({**cfg, "model": {**cfg["model"], "spec": spec}}))
        out.append(str(path))
    return out


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    losses = list(dict.fromkeys(r["loss"] for r in rows))
    for k, spec in enumerate(MODELS):
        pts = [r for r in rows if r["node"] == spec]
        xs = [losses.index(r["loss"]) + (k - 0.5) * 0.2 for r in pts]
        ax.errorbar(xs, [r["delta"] for r in pts], yerr=[r["delta_ci"] for r in pts], fmt="o", capsize=4, label=spec)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(losses)), losses)
    ax.set(title="held-out gain in the pair − gain alone (95 % CI over seeds)", ylabel="Δ accuracy")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="examples/lab-solo.yaml")
    ap.add_argument("--losses", nargs="+", default=["nois", "tis", "gepo", "f-tis", "tis/sequence", "f-tis/sequence"],
                    help="NAME or NAME/sequence (the whole-completion ratio instead of chunks)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--external", type=int, default=4, help="J: the peer's groups per step in pair runs")
    ap.add_argument("--eval-size", type=int, default=256)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    # 8 prompts a round in every run, so a node's own task stream (position = round × 8 + i) is the same
    common = {"tasks.eval_size": args.eval_size, "eval.samples": 4, "generation.prompts_per_round": 8}
    runs: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ["solo", *args.losses]:
            loss, _, scale = name.partition("/")  # "tis/sequence": tis with the whole-completion ratio
            paths = configs(args.config, Path(tmp), None if name == "solo" else loss)
            j = 0 if name == "solo" else args.external
            over = {**common, "train.cross_tokenizer": scale or "chunks"}
            for seed in args.seeds:
                run = run_swarm(paths, 8, j, seed, args.rounds, over)
                runs.setdefault(name, []).append(run)
                gains = [a - b for a, b in zip(run["after"], run["before"])]
                print(f"{name:6s} seed {seed}: gains {' '.join(f'{g:+.3f}' for g in gains)}, "
                      f"peer groups {run['external_groups']}, ext w {run['external_weight']}, "
                      f"w ≥ 0.1 {run['external_share']}, filtered {run['filtered']} "
                      f"({time.perf_counter() - t0:.0f} s)", flush=True)
    rows = []
    for name in args.losses:
        for k, spec in enumerate(MODELS):
            solo = [r["after"][k] - r["before"][k] for r in runs["solo"]]
            pair = [r["after"][k] - r["before"][k] for r in runs[name]]
            (d, dh), (g, gh) = interval([p - s for p, s in zip(pair, solo)]), interval(pair)
            weights = [r["external_weight"][k] for r in runs[name] if r["external_weight"][k] is not None]
            shares = [r["external_share"][k] for r in runs[name] if r["external_share"][k] is not None]
            filtered = [r["filtered"][k] for r in runs[name] if r["filtered"][k] is not None]
            rows.append({"loss": name, "node": spec, "gain_solo": statistics.fmean(solo), "gain_pair": g,
                         "gain_pair_ci": gh, "delta": d, "delta_ci": dh,
                         "per_seed_delta": " ".join(f"{p - s:+.3f}" for p, s in zip(pair, solo)),
                         "peer_groups": statistics.fmean(r["external_groups"][k] for r in runs[name]),
                         "ext_w": statistics.fmean(weights) if weights else float("nan"),
                         "w_share": statistics.fmean(shares) if shares else float("nan"),
                         "filtered": statistics.fmean(filtered) if filtered else float("nan")})
    print(f"\n== {' + '.join(MODELS)}: 8 own (+ {args.external} peer's) groups × {args.rounds} rounds, "
          f"seeds {args.seeds}, held-out {args.eval_size} × 4; Δ = pair − solo gain, 95 % t-interval")
    print(table(rows, list(rows[0])))
    RESULTS.mkdir(parents=True, exist_ok=True)
    plot(rows, RESULTS / "hetero.png")
    path = write_json("hetero", {"args": vars(args), "rows": rows, "runs": runs,
                                 "seconds": time.perf_counter() - t0})
    print(f"\nwrote {path} and {RESULTS / 'hetero.png'} in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
