"""FedAvg-GRPO vs PubSwap-Balanced on a small CPU federation (PubSwap paper §4, docs/ARCHITECTURE.md §8).

Both runs are `swarm local --nodes N` with the examples in examples/federated/ (lab model + LoRA,
four chain_sum families split by Dirichlet(α)), the same seeds and the same rounds; the only
difference is the algorithm. Every τ rounds the clients average their adapters (FedIT); in
PubSwap every τ_swap-th round is a public step. Measured per run:

  drift      per client at each averaging boundary: ‖θ_n − θ_mean‖₂ over the LoRA tensors just
             before averaging (the `avg_drift` of the node's metrics)
  held-out   accuracy on the shared held-out set (every family), one sampled completion per item,
             measured right after each averaging (all clients then hold the same adapter)
  bytes      per client: averaging = sent + received by the butterfly all-reduce (computed from its
             partition, float32); public step = own bundle × (N − 1) peers that fetched it + the
             N − 1 bundles it fetched (from every node's logged bundle size)

    python -m bench.learning.federated                      # 4 clients, 40 rounds, τ = 10, τ_swap = 2 (~5 min)
    python -m bench.learning.federated --rounds 20 --tau 5 --tag _tau5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness.models import model_cached
from bench.harness.output import pyplot, results_dir, save_figure, table, write_json
from node.round.record import read_records

RESULTS = results_dir("learning")

RUNS = {"fedavg": "examples/federated/fedavg.yaml", "pubswap-balanced": "examples/federated/pubswap-balanced.yaml"}


def run_swarm(config: str, out: Path, args) -> float:
    sets = [f"federated.tau={args.tau}", f"federated.pubswap.tau_swap={args.tau_swap}",
            f"federated.split.alpha={args.alpha}", f"eval.every={args.tau}", f"tasks.eval_size={args.eval_size}",
            f"model.spec={args.model}"]
    cmd = [sys.executable, "-m", "ops.cli", "local", "--nodes", str(args.nodes), "--config", config,
           "--rounds", str(args.rounds), "--out", str(out)] + [a for s in sets for a in ("--set", s)]
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return time.perf_counter() - started


def summarize(out: Path, nodes: list[str], n: int) -> dict:
    per = {name: read_records(out / name / "metrics.jsonl") for name in nodes}
    # federated averaging's fields are the record's mode fields (node.federated.round)
    boundaries = sorted({m.round for rows in per.values() for m in rows if "avg_averaged" in m.mode})
    drift = {name: [next((m.mode.get("avg_drift") for m in rows if m.round == r), None) for r in boundaries]
             for name, rows in per.items()}
    evals = sorted({m.round for rows in per.values() for m in rows if m.eval.eval_accuracy is not None})
    acc = {name: [next(m.eval.eval_accuracy for m in rows if m.round == r) for r in evals] for name, rows in per.items()}
    before = [rows[0].eval.eval_accuracy_before for rows in per.values()]
    avg_bytes = [m.mode["avg_bytes"] for rows in per.values() for m in rows if m.mode.get("avg_averaged")]
    groups = [m.mode["avg_group_size"] for rows in per.values() for m in rows if "avg_averaged" in m.mode]
    public_rounds = sorted({m.round for rows in per.values() for m in rows if m.mode.get("public")})
    public_bytes = []
    for r in public_rounds:
        sizes = {name: next((m.exchange.wire_bytes for m in rows if m.round == r), 0) for name, rows in per.items()}
        for name in nodes:
            others = sum(v for k, v in sizes.items() if k != name)
            public_bytes.append(sizes[name] * (n - 1) + others)
    return {
        "boundaries": boundaries, "drift": drift, "eval_rounds": evals, "held_out": acc,
        "held_out_before_mean": statistics.fmean([b for b in before if b is not None])
        if any(b is not None for b in before) else None,
        "held_out_final_mean": statistics.fmean(a[-1] for a in acc.values()) if evals else None,
        "drift_mean": statistics.fmean(d for ds in drift.values() for d in ds if d is not None) if boundaries else None,
        "group_size_mean": statistics.fmean(groups) if groups else None,
        "averaging_bytes_per_boundary": statistics.fmean(avg_bytes) if avg_bytes else 0,
        "public_bytes_per_step": statistics.fmean(public_bytes) if public_bytes else 0,
        "public_steps": len(public_rounds),
        "replaced": sum(m.mode.get("pubswap_replaced", 0) for rows in per.values() for m in rows),
        "reward_mean": statistics.fmean(m.generation.reward_mean for rows in per.values() for m in rows),
    }


def plot(results: dict, path: Path, args) -> None:
    plt = pyplot()

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for (name, res), style in zip(results.items(), ("-", "--")):
        for i, (client, ds) in enumerate(res["drift"].items()):
            ax1.plot([b + 1 for b in res["boundaries"]], ds, style, marker="o", color=f"C{i}",
                     label=f"{name} {client.rsplit('-', 1)[-1]}")
        mean = [statistics.fmean(a[j] for a in res["held_out"].values()) for j in range(len(res["eval_rounds"]))]
        xs, ys = [0] + [r + 1 for r in res["eval_rounds"]], [res["held_out_before_mean"]] + mean
        ax2.plot(xs, ys, style, marker="o", color="k", label=name)
    ax1.set(xlabel="round", ylabel="‖θ_n − θ_mean‖₂ before averaging", title="per-client drift")
    ax2.set(xlabel="round", ylabel="held-out accuracy (mean over clients)", title="held-out accuracy")
    ax1.legend(fontsize=6, ncol=2)
    ax2.legend(fontsize=8)
    fig.suptitle(f"{args.nodes} clients, {args.model} + LoRA, Dirichlet α={args.alpha}, τ={args.tau}, "
                 f"τ_swap={args.tau_swap}, {args.rounds} rounds")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="lab-chain-sum")
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--tau", type=int, default=10)
    p.add_argument("--tau-swap", type=int, default=2)
    p.add_argument("--alpha", type=float, default=0.3)
    p.add_argument("--eval-size", type=int, default=128)
    p.add_argument("--out", help="run directories (default: a temp dir)")
    p.add_argument("--tag", default="")
    args = p.parse_args(argv)
    if args.model.startswith("lab-") and not model_cached(args.model):
        sys.exit(f"{args.model} is not built yet: run `swarm models fetch {args.model}` first (minutes)")
    root = Path(args.out or tempfile.mkdtemp(prefix="bench-federated-"))
    results, seconds = {}, {}
    for name, config in RUNS.items():
        out = root / name
        seconds[name] = run_swarm(config, out, args)
        prefix = "fedavg" if name == "fedavg" else "balanced"
        results[name] = summarize(out, [f"{prefix}-{i}" for i in range(args.nodes)], args.nodes)
    rows = [{"run": k, "held-out before": r["held_out_before_mean"], "held-out final": r["held_out_final_mean"],
             "drift mean": r["drift_mean"], "group size": r["group_size_mean"],
             "avg B/boundary": r["averaging_bytes_per_boundary"], "public B/step": r["public_bytes_per_step"],
             "public steps": r["public_steps"], "replaced": r["replaced"], "wall s": seconds[k]}
            for k, r in results.items()]
    print(table(rows, list(rows[0])))
    for name, res in results.items():
        print(f"{name} drift per client at rounds {[b + 1 for b in res['boundaries']]}:")
        for client, ds in res["drift"].items():
            print(f"  {client}: " + " ".join("-" if d is None else f"{d:.4f}" for d in ds))
    png = RESULTS / f"federated{args.tag}.png"
    RESULTS.mkdir(parents=True, exist_ok=True)
    plot(results, png, args)
    path = write_json(f"federated{args.tag}", {"args": vars(args), "wall_s": seconds, "runs": results}, RESULTS)
    print(f"results: {path}\nplot: {png}")


if __name__ == "__main__":
    main()
