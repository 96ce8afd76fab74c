"""Toy-scale F-TIS ablation: learning from another policy's groups, NoIS vs F-TIS, and
IS-weight variance of token-level IS (GRPO) vs GEPO as the policy gap grows.

Learner: a lab model (`--learner`: lab-spell with spell_backward by default, lab-chain-sum with
chain_sum for the recorded part B), real reasoning-gym rewards; behaviour policies are *other*
models whose groups the learner receives, as from a peer:

  perturbed(σ)   a copy of the learner with every weight tensor W ← W + σ·std(W)·N(0, 1) (seeded):
                 same tokenizer, so per-token μ is used directly (docs/ARCHITECTURE.md §6, aligned rows)
  tiny-qwen2     a different model *and* tokenizer: the learner re-tokenises the text and uses
                 the length-normalised sequence ratio (docs/ARCHITECTURE.md §6, unaligned rows)

A. Stability (f-tis paper, ablation of the IS variant): N batches of B×G completions are sampled
   once from perturbed(σ_A) and every loss trains a fresh copy of the learner on the *same*
   batches (only informative groups; advantages computed by the learner's verifier). Per step:
   loss, pre-clip gradient norm, the loss's IS weight mean/var/max, filtered fraction, k3 KL to
   μ; the learner's own sampled accuracy on a fixed held-out set before, midway and at the end.
   Run it once per seed (`--part A --seed S --tag _aS`), then `--combine _a0 _a1 _a2` prints each
   loss's held-out gain and its difference from NoIS, paired by seed, with 95 % t-intervals.
B. IS-weight variance vs policy gap (gepo paper §3, Fig. 2 idea): for growing σ, B×G completions
   from perturbed(σ) are scored by the (untrained) learner and passed to the `grpo` loss (token
   weights exp(log π_θ − log μ_t)) and the `gepo` loss (sequence weights p_i / E_q[q]); their
   `is_weight_var` is printed next to the KL estimate; plus the re-tokenised tiny-qwen2 pair.

    python -m bench.learning.fis_ablation [--learner lab-spell] [--steps 30] [--losses nois tis f-tis] [--sigma-a 0.5]
                                 [--sigmas 0 0.25 0.5 0.75 1 1.5] [--lr 1e-4] [--part B --b-seeds 0 1 2]
    python -m bench.learning.fis_ablation --combine _a0 _a1 _a2

Writes bench/results/learning/fis_ablation{tag}.json (and .png when B ran). Part A on lab-spell: about a minute per seed.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from bench.harness.arms import cells, compare  # noqa: E402
from bench.harness.models import set_threads, task_source  # noqa: E402
from bench.harness.output import results_dir, save_figure, table, write_json  # noqa: E402
from bench.harness.stats import interval  # noqa: E402
from losses import build_loss  # noqa: E402
from node.generation.config import GenerationConfig  # noqa: E402
from node.generation.hf import HFGenerator  # noqa: E402
from node.models.config import ModelConfig  # noqa: E402
from node.models.load import load_model  # noqa: E402
from node.round.config import TrainConfig  # noqa: E402
from node.round.groups import verify_group  # noqa: E402
from node.round.train import build_rows, loss_inputs, train_step  # noqa: E402
from node.tasks.source import render_prompt  # noqa: E402

RESULTS = results_dir("learning")


@torch.no_grad()
def perturbed(model: torch.nn.Module, sigma: float, seed: int) -> torch.nn.Module:
    """A copy with W ← W + σ·std(W)·ε per tensor (ε ~ N(0, 1) seeded); σ = 0 is an exact copy."""
    out = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    for p in out.parameters():
        if sigma > 0 and p.numel() > 1:
            p.add_(sigma * p.std() * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return out


class Sampler:
    """A behaviour policy producing verified groups for the learner's tasks (as a peer would)."""

    def __init__(self, model, tokenizer, source, args, aligned: bool):
        self.gen = HFGenerator(model, tokenizer, GenerationConfig(max_new_tokens=args.max_new_tokens))
        self.tokenizer, self.source, self.aligned, self.group = tokenizer, source, aligned, args.group_size

    def groups(self, round_: int, prompts: int):
        tasks = self.source.sample(round_, prompts)
        texts = [render_prompt(self.tokenizer, t.question, None) for t in tasks]
        out = self.gen.generate(texts, n=self.group)
        return [verify_group(self.source, t, c, source="peer", aligned=self.aligned, round=round_)
                for t, c in zip(tasks, out.groups)]


def accuracy(model, tokenizer, prompts: list[str], tasks, source, samples: int) -> float:
    """Sampled exact-match accuracy (reward 1) over prompts × samples."""
    out = HFGenerator(model, tokenizer, GenerationConfig(max_new_tokens=16)).generate(prompts, n=samples)
    rewards = [source.score(t, c.text) for t, g in zip(tasks, out.groups) for c in g]
    return sum(r >= 1.0 for r in rewards) / len(rewards)


def stability(base, tok, source, args) -> dict:
    """Part A: every loss trains its own learner copy on the same off-policy batches."""
    beh = Sampler(perturbed(base, args.sigma_a, args.seed), tok, source, args, aligned=True)
    torch.manual_seed(args.seed)
    batches = [beh.groups(s, args.prompts) for s in range(args.steps)]
    eval_tasks = source.sample(10_000, args.eval_prompts)  # a round index no batch uses
    eval_prompts = [render_prompt(tok, t.question, None) for t in eval_tasks]
    prompt_of = lambda task: render_prompt(tok, task.question, None)  # noqa: E731
    cfg = TrainConfig(lr=args.lr, micro_batch_rows=args.prompts * args.group_size, grad_clip=1.0)
    eval_at = sorted({0, args.steps // 2, args.steps})
    out = {}
    for name in args.losses:
        learner = copy.deepcopy(base)
        opt = torch.optim.AdamW([p for p in learner.parameters() if p.requires_grad], lr=args.lr, betas=cfg.betas)
        loss_fn, steps, evals = build_loss(name), [], {}
        torch.manual_seed(args.seed + 1)
        for s, groups in enumerate(batches + [None]):
            if s in eval_at:
                evals[s] = accuracy(learner, tok, eval_prompts, eval_tasks, source, args.eval_samples)
            if groups is None:
                break
            rows = build_rows([g for g in groups if g.informative], tok, prompt_of)
            if not rows:
                steps.append({"step": s, "stepped": False})
                continue
            res = train_step(learner, opt, rows, loss_fn, cfg, temperature=1.0, pad_id=tok.pad_token_id)
            steps.append({"step": s, "stepped": True, "rows": res.rows, **res.metrics.values()})
        out[name] = {"steps": steps, "eval_accuracy": evals}
    return out


def summarise(name: str, res: dict) -> dict:
    st = [s for s in res["steps"] if s["stepped"]]
    finite = all(math.isfinite(s["loss"]) and math.isfinite(s["grad_norm"]) for s in st)
    ev = res["eval_accuracy"]
    return {"loss": name, "steps": len(st), "finite": finite,
            "grad_norm_mean": statistics.fmean(s["grad_norm"] for s in st),
            "grad_norm_max": max(s["grad_norm"] for s in st),
            "loss_std": statistics.pstdev(s["loss"] for s in st),
            "is_w_max": max(s["is_weight_max"] for s in st),
            "is_w_var_mean": statistics.fmean(s["is_weight_var"] for s in st),
            "filtered_frac": statistics.fmean(s["filtered_frac"] for s in st),
            "kl_beh": statistics.fmean(s["kl_beh"] for s in st),
            "acc_start": ev[min(ev)], "acc_end": ev[max(ev)]}


@torch.no_grad()
def variance_point(learner, tok, sampler: Sampler, args, round_: int) -> dict:
    groups = sampler.groups(round_, args.prompts)
    rows = build_rows(groups, tok, lambda task: render_prompt(tok, task.question, None))
    inputs = loss_inputs(learner, rows, 1.0, tok.pad_token_id)
    token, gepo = build_loss("grpo")(inputs).metrics, build_loss("gepo")(inputs).metrics
    seq = build_loss("gspo")(inputs).metrics  # its weight metrics are of the unclipped p_i/q_i
    return {"kl_beh": token["kl_beh"], "token_is_var": token["is_weight_var"], "token_is_max": token["is_weight_max"],
            "seq_is_var": seq["is_weight_var"], "seq_is_max": seq["is_weight_max"],
            "gepo_var": gepo["is_weight_var"], "gepo_max": gepo["is_weight_max"],
            "reward_mean": statistics.fmean(r for g in groups for r in g.rewards)}


def variance_vs_gap(base, tok, source, args) -> list[dict]:
    """Part B: IS-weight variance of token IS (grpo), sequence IS p/q (gspo's ratio) and GEPO for growing σ,
    and a re-tokenised pair; with several seeds (`--b-seeds`) each point is the mean over them and the
    GEPO / sequence-IS ratio is also given per seed (min–max)."""
    base.eval()
    keys = ("kl_beh", "token_is_var", "seq_is_var", "gepo_var", "token_is_max", "seq_is_max", "gepo_max", "reward_mean")
    behaviours = [(f"perturbed σ={sigma:g}", sigma, i) for i, sigma in enumerate(args.sigmas)]
    if args.hetero:
        behaviours.append(("tiny-qwen2 (re-tokenised)", None, None))
    points = []
    for label, sigma, i in behaviours:
        per_seed = []
        for seed in args.b_seeds:
            torch.manual_seed(seed)
            if sigma is None:
                other = load_model(ModelConfig(spec="tiny-qwen2"))
                sampler = Sampler(other.model, other.tokenizer, source, args, aligned=False)
            else:
                sampler = Sampler(perturbed(base, sigma, seed + 100 + i), tok, source, args, aligned=True)
            per_seed.append(variance_point(base, tok, sampler, args, 20_000 + 100 * seed))
        ratios = [p["gepo_var"] / p["seq_is_var"] for p in per_seed if p["seq_is_var"] > 0]
        points.append({"behaviour": label, "sigma": sigma, "seeds": len(per_seed),
                       **{k: statistics.fmean(p[k] for p in per_seed) for k in keys},
                       "gepo_over_seq_min": min(ratios, default=float("nan")),
                       "gepo_over_seq_max": max(ratios, default=float("nan")), "per_seed": per_seed})
    return points


def plot(stab: dict, points: list[dict], path) -> None:
    """A's gradient norms and losses (when run) and B's variance against σ."""
    if not stab:
        fig, ax = plt.subplots(1, 1, figsize=(6.5, 4.2))
        axes = [None, None, ax]
    else:
        fig, axes = plt.subplots(1, 3, figsize=(16, 4.2))
    for name, res in stab.items():
        st = [s for s in res["steps"] if s["stepped"]]
        axes[0].plot([s["step"] for s in st], [s["grad_norm"] for s in st], marker="o", label=name)
        axes[1].plot([s["step"] for s in st], [s["loss"] for s in st], marker="o", label=name)
    if stab:
        axes[0].set(title="A. pre-clip gradient norm per step", xlabel="step", ylabel="‖g‖", yscale="log")
        axes[1].set(title="A. loss per step", xlabel="step", ylabel="loss")
        for ax in axes[:2]:
            ax.legend()
    pts = [p for p in points if p["sigma"] is not None]
    sig = [p["sigma"] for p in pts]
    axes[2].plot(sig, [max(p["token_is_var"], 1e-6) for p in pts], marker="o", label="token IS (grpo)")
    axes[2].plot(sig, [max(p["seq_is_var"], 1e-6) for p in pts], marker="^", label="sequence IS p/q (gspo)")
    axes[2].plot(sig, [max(p["gepo_var"], 1e-6) for p in pts], marker="s", label="GEPO")
    for p in pts:  # the policy gap each σ produced
        axes[2].annotate(f"KL {p['kl_beh']:.2g}", (p["sigma"], max(p["token_is_var"], 1e-6)), fontsize=7,
                         textcoords="offset points", xytext=(2, 6))
    axes[2].set(title="B. IS-weight variance vs behaviour perturbation σ", xlabel="σ (relative weight noise)",
                ylabel="variance (floored at 1e-6)", yscale="log")
    axes[2].legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def combine(tags: list[str]) -> None:
    """Part A over seeds: per loss the held-out gain (end − start) and its difference from NoIS, paired by seed."""
    runs = [json.loads((RESULTS / f"fis_ablation{t}.json").read_text()) for t in tags]
    seeds = [r["args"]["seed"] for r in runs]
    by_loss = {}
    for r in runs:
        for row in r["stability_summary"]:
            by_loss.setdefault(row["loss"], []).append(row)
    gains_by_seed = [{"loss": row["loss"], "seed": r["args"]["seed"], "gain": row["acc_end"] - row["acc_start"]}
                     for r in runs for row in r["stability_summary"]]
    vs_nois = {d["pair"].partition(" − ")[0]: d for d in compare(cells(gains_by_seed, ("loss",)),
                                                                  [((name,), ("nois",)) for name in by_loss], ("gain",))}
    rows = []
    for name, per_seed in by_loss.items():
        gains = [row["acc_end"] - row["acc_start"] for row in per_seed]
        g, gh = interval(gains)
        d = vs_nois.get(name, {"gain": 0.0, "gain_ci": 0.0})  # no NoIS runs: nothing to pair with
        rows.append({"loss": name, "seeds": len(per_seed), "acc_start": statistics.fmean(x["acc_start"] for x in per_seed),
                     "gain": f"{g:+.3f} ± {gh:.3f}", "gain_vs_nois": f"{d['gain']:+.3f} ± {d['gain_ci']:.3f}",
                     "per_seed_gain": " ".join(f"{x:+.3f}" for x in gains),
                     "grad_norm_mean": statistics.fmean(x["grad_norm_mean"] for x in per_seed),
                     "grad_norm_max": max(x["grad_norm_max"] for x in per_seed),
                     "kl_beh": statistics.fmean(x["kl_beh"] for x in per_seed),
                     "filtered_frac": statistics.fmean(x["filtered_frac"] for x in per_seed)})
    a = runs[0]["args"]
    print(f"== A over seeds {seeds}: learner {runs[0]['learner']}, {a['steps']} steps on perturbed(σ={a['sigma_a']}), "
          f"held-out {a['eval_prompts']}×{a['eval_samples']}; 95 % t-intervals over seeds")
    print(table(rows, list(rows[0])))
    path = write_json("fis_ablation_a", {"tags": tags, "seeds": seeds, "rows": rows}, RESULTS)
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for x, (name, per_seed) in enumerate(by_loss.items()):
        gains = [row["acc_end"] - row["acc_start"] for row in per_seed]
        m, h = interval(gains)
        ax.errorbar([x], [m], yerr=[h], fmt="s", capsize=6, color="k")
        ax.scatter([x + 0.08] * len(gains), gains, alpha=0.6, label="seeds" if x == 0 else None)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xticks(range(len(by_loss)), list(by_loss))
    ax.set(title=f"A. held-out gain after {a['steps']} steps on perturbed(σ={a['sigma_a']}) groups",
           ylabel="accuracy end − start (mean, 95 % CI)")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, RESULTS / "fis_ablation_a.png", dpi=110)
    print(f"\nwrote {path} and {RESULTS / 'fis_ablation_a.png'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--learner", default="lab-spell", help="lab-spell (spell_backward) or lab-chain-sum (chain_sum)")
    ap.add_argument("--steps", type=int, default=30, help="A: optimizer steps per loss")
    ap.add_argument("--losses", nargs="+", default=["nois", "tis", "f-tis"])
    ap.add_argument("--sigma-a", type=float, default=0.5, help="A: behaviour perturbation")
    ap.add_argument("--sigmas", type=float, nargs="+", default=[0.0, 0.25, 0.5, 0.75, 1.0, 1.5])
    ap.add_argument("--no-hetero", dest="hetero", action="store_false", help="B: skip the tiny-qwen2 pair")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--eval-prompts", type=int, default=256)
    ap.add_argument("--eval-samples", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--b-seeds", type=int, nargs="+", default=[0], help="B: seeds per point (behaviour and samples)")
    ap.add_argument("--part", choices=["A", "B", "AB"], default="AB", help="which parts to run")
    ap.add_argument("--tag", default="")
    ap.add_argument("--combine", nargs="+", metavar="TAG", help="only combine earlier part-A runs (their tags)")
    args = ap.parse_args()
    if args.combine:
        combine(args.combine)
        return
    set_threads(args.threads)
    t0 = time.perf_counter()
    loaded = load_model(ModelConfig(spec=args.learner))
    base, tok, source = loaded.model, loaded.tokenizer, task_source(args.learner)

    stab, summary, points = {}, [], []
    if "A" in args.part:
        stab = stability(base, tok, source, args)
        summary = [summarise(n, r) for n, r in stab.items()]
        print(f"== A. {args.steps} steps on groups from perturbed(σ={args.sigma_a}), lr {args.lr}, "
              f"{args.prompts}×{args.group_size} per batch")
        print(table(summary, list(summary[0])))
    if "B" in args.part:
        points = variance_vs_gap(base, tok, source, args)
        for p in points:
            p["gepo_over_token_var"] = p["gepo_var"] / p["token_is_var"] if p["token_is_var"] > 0 else float("nan")
            p["gepo_over_seq_var"] = p["gepo_var"] / p["seq_is_var"] if p["seq_is_var"] > 0 else float("nan")
        print(f"\n== B. IS-weight variance vs policy gap ({args.prompts}×{args.group_size} completions each, "
              f"mean over seeds {args.b_seeds})")
        print(table(points, ["behaviour", "kl_beh", "token_is_var", "seq_is_var", "gepo_var", "gepo_over_token_var",
                             "gepo_over_seq_var", "gepo_over_seq_min", "gepo_over_seq_max", "token_is_max",
                             "seq_is_max", "gepo_max", "reward_mean"]))
    RESULTS.mkdir(parents=True, exist_ok=True)
    png = RESULTS / f"fis_ablation{args.tag}.png"
    if points:
        plot(stab, points, png)
    path = write_json(f"fis_ablation{args.tag}", {"args": vars(args), "learner": args.learner, "stability_summary": summary,
                                                  "stability": stab, "variance_vs_gap": points,
                                                  "seconds": time.perf_counter() - t0}, RESULTS)
    print(f"\nwrote {path} and {png} in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
