"""GEPO against GRPO and sequence-level IS under delay (HeteroRL, gepo paper §4), on the lab model.

One learner (role learner, `run_learner_round`) trains on the records of K samplers (`sample_round`),
all in one process on the in-memory twin of the transport (swarm.exchange.twin: the real encode, vet, decode
and ingest path), one torch thread each, so a run is reproducible and the runs differ only in the
loss and the staleness bound.

Delay, in the learner's optimizer steps. The paper's delay model (clipped log-normal, 60–1920 s;
node.round.delay) is drawn per sampler batch and turned into steps at `--seconds-per-step` (28 s:
the paper's 1800 s window spans ≤ 64 steps), so d ≥ 2 steps, median 10. A batch is sampled with the
learner's weights of d steps ago (snapshots; version 0 at the start); a draw above the bound
(`ingest.max_delay_steps`) is a batch the learner would drop as stale_version, so it is counted and
redrawn instead of generated — the accepted batches' staleness is distributed exactly as in a run
that generates and drops them, at a fraction of the compute. Bound 0 is the paper's online case: no
delay. The same seed draws the same delays for every loss.

Losses, with only the importance weight differing (the paper's Listing 1): `grpo` (token ratio
π_θ/μ against the sampler), `seq-is` (`gspo`: the length-normalised sequence ratio p_i/q_i), `gepo`
(p_i / E_q[q] within the prompt group), all clipped at ε 0.2, mean-only advantages, no KL (β 0; the
paper uses CPPO-KL 0.005 for all three). Per step the learner also computes, from the same scores,
the variance of all three weights (`var_token`, `var_seq`, `var_gepo`), whatever loss it trains with.

Reported per (loss, bound), mean and 95 % t-interval over seeds: held-out accuracy after the run
(and before), reward of the samplers' groups the learner received (re-verified; last quarter of the
run), the trained loss's IS-weight variance, the three diagnostic variances, grad norm (mean, max),
clipped fraction, KL(μ‖π_θ) per token, staleness of the groups trained. Plot: bench/results/learning/heterorl<tag>.png.

    python -m bench.learning.heterorl --config examples/heterorl/lab.yaml --seeds 0 1 2 --steps 60
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import tempfile
import time

import torch

from bench.harness.options import parse_sets
from bench.harness.output import pyplot, results_dir, save_figure, table, write_json
from bench.harness.stats import interval
from losses.base import behaviour_view, masked_stats, row_mean, safe_exp
from losses.gepo import gepo_log_weight
from node.books.progress import Progress
from node.config import load_config
from node.heterorl.learner import run_learner_round
from node.heterorl.sampler import sample_round
from node.node import Node
from node.round.config import DelayConfig
from node.round.delay import DelayModel
from swarm.exchange.twin import InMemoryHub, InMemoryTransport

RESULTS = results_dir("learning")

LEARNER = "QmBenchLearner" + "1" * 32
LOSSES = {
    "grpo": {"loss.name": "grpo", "loss.eps_low": 0.2, "loss.eps_high": 0.2, "loss.norm": "seq"},
    "seq-is": {"loss.name": "gspo", "loss.eps_low": 0.2, "loss.eps_high": 0.2},
    "gepo": {"loss.name": "gepo", "loss.eps_low": 0.2, "loss.eps_high": 0.2, "loss.beta": 0.0},
}
DIAG = ("var_token", "var_seq", "var_gepo")


@torch.no_grad()
def weight_diagnostics(inputs) -> dict[str, float]:
    """Variance of the three importance weights on one batch: token π_θ/μ, sequence p/q, GEPO p/E_q[q]."""
    view = behaviour_view(inputs)
    token = safe_exp(view.log_ratio)
    seq = safe_exp(row_mean(view.log_ratio, view))
    gepo = safe_exp(gepo_log_weight(view.seq_logp, view.seq_logq, inputs.group_ids, view.row_valid, 0.0))
    return {"var_token": masked_stats(token, view.valid)[1], "var_seq": masked_stats(seq, view.row_valid)[1],
            "var_gepo": masked_stats(gepo, view.row_valid)[1]}


class Diagnosed:
    """The node's loss, plus weight_diagnostics in its metrics."""

    def __init__(self, fn):
        self.fn, self.needs_reference = fn, getattr(fn, "needs_reference", False)

    def __call__(self, inputs):
        out = self.fn(inputs)
        out.metrics.update(weight_diagnostics(inputs))
        return out


def evaluate(node: Node, samples: int) -> float:
    """Held-out accuracy with `samples` completions per item (one 256-item draw alone swings ±0.04)."""
    tasks = node._eval_set
    out = node.generator.generate([node.prompt_of(t) for t in tasks], n=samples)
    scores = [node.tasks.score(t, c.text) >= 1.0 for t, group in zip(tasks, out.groups) for c in group]
    return sum(scores) / len(scores)


def _opts(name: str, seed: int, role: str, over: dict) -> dict:
    return {"name": name, "seed": seed, "role": role, "rounds": 10**6, "torch_threads": 1, "swarm.enabled": True,
            "swarm.max_fetches_per_window": 100_000, "metrics.console": False, "checkpoint.every": 10**6,
            "eval.every": 0, "eval.at_start": False, **over}


def run_one(config: str, loss: str, bound: int, seed: int, args, common: dict, before: dict) -> dict:
    """One loss, one staleness bound, one seed: the learner's per-step metrics and held-out accuracy."""
    hub = InMemoryHub()
    delay_on = bound > 0
    with tempfile.TemporaryDirectory() as tmp:
        learner = Node(load_config(config, _opts("learner", seed, "learner", {
            **common, **LOSSES[loss], "ingest.max_delay_steps": bound, "heterorl.wait_s": 0,
            "tasks.seed": 1000 * seed})), f"{tmp}/learner", transport=InMemoryTransport(hub, LEARNER))
        learner.loss_fn = Diagnosed(learner.loss_fn)
        samplers = [Node(load_config(config, _opts(f"s{k}", 100 * seed + k, "sampler", {
            **common, "heterorl.follow": [LEARNER], "tasks.seed": 1000 * seed + k + 1})), f"{tmp}/s{k}",
            transport=InMemoryTransport(hub, f"QmBenchSampler{k}" + "1" * 30)) for k in range(args.samplers)]
        delays = [DelayModel(DelayConfig(kind="lognormal", seed=int(f"{seed}{k}9"))) for k in range(args.samplers)]
        snapshots = {0: {k: v.clone() for k, v in learner.model.state_dict().items()}}
        steps, evals, simulated_drops = [], {}, 0
        try:
            if seed not in before:
                before[seed] = evaluate(learner, args.eval_samples)
            evals[0] = before[seed]
            torch.manual_seed(seed)  # every run of a seed starts from the same RNG state, evaluated or not
            for step in range(args.steps):
                v = learner.policy_version
                for k, sampler in enumerate(samplers):
                    d = 0
                    if delay_on:
                        while (d := int(delays[k].draw() // args.seconds_per_step)) > bound:
                            simulated_drops += args.prompts  # a batch the learner would drop (stale_version)
                    version = max(0, v - d)
                    sampler.model.load_state_dict(snapshots[version])
                    sampler.policy_version = version
                    sample_round(sampler, step, time.perf_counter(), {})
                m = run_learner_round(learner, step).line()  # its JSONL line: these fields by name, DIAG's too
                steps.append({k: m.get(k) for k in (
                    "policy_version", "reward_mean", "rows_trained", "groups_external", "loss", "grad_norm",
                    "is_weight_var", "is_weight_max", "clip_frac", "kl_beh", "staleness_mean", "staleness_max",
                    *DIAG)} | {"drops": m["drops"]})
                snapshots[learner.policy_version] = {k: t.clone() for k, t in learner.model.state_dict().items()}
                for old in [x for x in snapshots if x < learner.policy_version - bound]:
                    del snapshots[old]
                if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
                    evals[step + 1] = evaluate(learner, args.eval_samples)
        finally:
            for n in [learner, *samplers]:
                n.close()
    return {"steps": steps, "evals": evals, "simulated_stale_drops": simulated_drops}


def _mean(steps: list[dict], key: str, fn=statistics.fmean) -> float | None:
    xs = [s[key] for s in steps if s.get(key) is not None and s.get("rows_trained")]
    return fn(xs) if xs else None


def summarise(run: dict) -> dict:
    st = run["steps"]
    q = max(1, len(st) // 4)
    first = [s["reward_mean"] for s in st[:q] if s["reward_mean"] is not None]
    rewards = [s["reward_mean"] for s in st[-q:] if s["reward_mean"] is not None]
    ev = run["evals"]
    return {"eval_before": ev[0], "eval_after": ev[max(ev)], "eval_best": max(v for k, v in ev.items() if k),
            "reward_first_q": statistics.fmean(first) if first else None,
            "reward_last_q": statistics.fmean(rewards) if rewards else None,
            "is_var": _mean(st, "is_weight_var"), "is_max": _mean(st, "is_weight_max", max),
            **{k: _mean(st, k) for k in DIAG}, "grad_norm": _mean(st, "grad_norm"),
            "grad_norm_max": _mean(st, "grad_norm", max), "clip_frac": _mean(st, "clip_frac"),
            "kl_beh": _mean(st, "kl_beh"), "staleness": _mean(st, "staleness_mean"),
            "steps_trained": sum(1 for s in st if s["rows_trained"]), "final_version": st[-1]["policy_version"]}


def plot(results: list[dict], path) -> None:
    plt = pyplot()

    panels = [("eval_after", "held-out accuracy after the run"), ("reward_last_q", "reward, last quarter"),
              ("is_var", "trained loss's IS-weight variance"), ("grad_norm", "grad norm (mean over steps)"),
              ("kl_beh", "KL(μ‖π_θ) per token"), ("staleness", "staleness of trained groups (steps)")]
    fig, axes = plt.subplots(2, 3, figsize=(16, 8.5))
    for ax, (key, title) in zip(axes.flat, panels):
        for loss in dict.fromkeys(r["loss"] for r in results):
            rows = [r for r in results if r["loss"] == loss and r[f"{key}_mean"] is not None]
            ax.errorbar([str(r["max_delay"]) for r in rows], [r[f"{key}_mean"] for r in rows],
                        yerr=[r[f"{key}_ci"] for r in rows], marker="o", capsize=3, label=loss)
        if key == "is_var":
            ax.set_yscale("log")
        ax.set(title=title, xlabel="max delay (learner steps)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="examples/heterorl/lab.yaml")
    ap.add_argument("--losses", nargs="+", default=list(LOSSES), choices=list(LOSSES))
    ap.add_argument("--max-delays", nargs="+", type=int, default=[0, 4, 16, 64])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=40, help="learner rounds per run")
    ap.add_argument("--samplers", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=4, help="prompts per sampler batch (× group_size)")
    ap.add_argument("--seconds-per-step", type=float, default=28.0)
    ap.add_argument("--eval-every", type=int, default=40, help="held-out evaluation every N steps (and at the end)")
    ap.add_argument("--eval-samples", type=int, default=4, help="completions per held-out item")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="overrides for every node")
    ap.add_argument("--tag", default="")
    args = ap.parse_args(argv)
    common = parse_sets(args.set)
    common["generation.prompts_per_round"] = args.prompts
    common["ingest.delay.kind"] = "none"  # delay is simulated in steps here (module docstring)
    random.seed(0)
    before: dict[int, float] = {}
    results, started = [], time.perf_counter()
    bar = Progress("bench.learning.heterorl", total=len(args.max_delays) * len(args.losses) * len(args.seeds), unit="runs",
                   every_s=0)  # k/N, ETA on stderr
    for bound in args.max_delays:
        for loss in args.losses:
            runs = []
            for seed in args.seeds:
                t0, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_utime
                run = run_one(args.config, loss, bound, seed, args, common, before)
                run.update(seed=seed, seconds=round(time.perf_counter() - t0, 1),
                           cpu_s=round(resource.getrusage(resource.RUSAGE_SELF).ru_utime - c0, 1), **summarise(run))
                print(json.dumps({"loss": loss, "max_delay": bound, **{k: v for k, v in run.items() if k != "steps"}}),
                      flush=True)
                runs.append(run)
                bar.advance()
            row = {"loss": loss, "max_delay": bound, "seeds": len(runs)}
            for key in ("eval_before", "eval_after", "eval_best", "reward_first_q", "reward_last_q", "is_var", *DIAG,
                        "grad_norm",
                        "grad_norm_max", "clip_frac", "kl_beh", "staleness"):
                xs = [r[key] for r in runs if r[key] is not None]
                row[f"{key}_mean"], row[f"{key}_ci"] = interval(xs) if xs else (None, None)
            row["runs"] = runs
            results.append(row)
    bar.close()
    cols = ["loss", "max_delay", "eval_before_mean", "eval_after_mean", "eval_after_ci", "reward_first_q_mean",
            "reward_last_q_mean",
            "is_var_mean", "var_token_mean", "var_seq_mean", "var_gepo_mean", "grad_norm_mean", "grad_norm_max_mean",
            "kl_beh_mean", "staleness_mean"]
    print(table(results, cols))
    RESULTS.mkdir(parents=True, exist_ok=True)
    plot(results, RESULTS / f"heterorl{args.tag}.png")
    write_json(f"heterorl{args.tag}", {"args": vars(args), "seconds": time.perf_counter() - started,
                                       "results": results}, RESULTS)


if __name__ == "__main__":
    main()
