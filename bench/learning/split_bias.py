"""Is a student paid for splitting a text differently from its canonical tokenization? (docs/benchmarks/learning.md §12F)

On-policy distillation across tokenizers gives the student's tokens a reverse-KL reward −(log π_S − log π_T),
where log π_T is the teacher's log-probability of the *text* (node.distill.score, the byte path) and log π_S the
student's of the *token sequence it sampled*. A text has many token sequences in the student's vocabulary; the
teacher's value is the same for all of them (under `distill.score_split: canonical`; nearly so under `requester`),
the student's is not. So the reward of one text written two ways differs by exactly the student's
log π_S(canonical) − log π_S(other split): the student is paid, in nats, for the splits it finds unlikely — and in
expectation over its splits of a text, by the entropy of its split given the text.

This bench measures that on the lab pair of §12E, without training: the student samples completions on its own
task stream, and for each one, its sampled split, its canonical split and up to `--alternatives` others (the
canonical split with one merged token undone into two vocabulary tokens) are scored by the student (teacher
forcing) and sent through the teacher's byte path (node.distill.score). Per split, the signals:

  chunk     today's: every student token of chunk c gets −d_c, d_c = L_S(c) − L_T(c); its pay on the completion
            Σ_c n_c·(L_T(c) − L_S(c)) (n_c student tokens in c)
  dpca      each student token i of chunk c gets (L_T(c)/L_S(c) − 1)·log p_i (the teacher's chunk value spread over
            the student's tokens in proportion to their own log-probabilities); its pay Σ_c (L_T(c) − L_S(c))
  marginal  L_T(text) − log Σ_splits π_S(split): the student's probability of the text, over the splits scored
            (a lower bound of the true marginal), the same for every split of one text

Printed and written to bench/results/learning/split_bias.json: the share of sampled completions whose split is not
canonical, the student's mass on other splits, each signal's pay of a split minus its pay of the canonical split
(mean over alternatives), chunk sizes, and how much the teacher's own value moves with the student's split.

    python -m bench.learning.split_bias --pairings spell2wide wide2spell --prompts 64 --samples 8
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import tempfile

import torch

from bench.harness.output import results_dir, write_json

RESULTS = results_dir("learning")
CONFIG = "examples/lab-solo.yaml"


def _alternatives(tok, ids: list[int], k: int, rng: random.Random) -> list[list[int]]:
    """Up to k other splits of the same text: one token of `ids` undone into two vocabulary tokens."""
    out = []
    positions = list(range(len(ids)))
    rng.shuffle(positions)
    for j in positions:
        piece = tok.decode([ids[j]])
        if len(piece) < 2 or ids[j] in tok.all_special_ids:
            continue
        for p in range(1, len(piece)):
            a = tok(piece[:p], add_special_tokens=False)["input_ids"]
            b = tok(piece[p:], add_special_tokens=False)["input_ids"]
            if len(a) == 1 and len(b) == 1 and tok.decode(a + b) == piece:
                out.append(ids[:j] + a + b + ids[j + 1:])
                break
        if len(out) >= k:
            break
    return out


def _student_logps(model, pad: int, prompt_ids: list[int], splits: list[list[int]]) -> list[list[float]]:
    from node.round.logprobs import TokenRow, score_rows

    with torch.no_grad():
        logp, _ = score_rows(model, [TokenRow(prompt_ids, s) for s in splits], 1.0, pad)
    return [logp[i, :len(s)].tolist() for i, s in enumerate(splits)]


def _signals(values: list[float], chunks: list[int] | None, slp: list[float]) -> dict:
    """Per-split pays (module docstring) from the teacher's values and chunks and the student's logps."""
    chunks = chunks or [1] * len(slp)
    pay_chunk = pay_dpca = 0.0
    start, sizes, lt = 0, [], 0.0
    for n in chunks:
        l_t, l_s = sum(values[start:start + n]), sum(slp[start:start + n])
        pay_chunk += n * (l_t - l_s)
        pay_dpca += l_t - l_s
        lt += l_t
        sizes.append(n)
        start += n
    return {"chunk": pay_chunk, "dpca": pay_dpca, "L_T": lt, "L_S": sum(slp), "sizes": sizes}


def measure(pairing: str, teacher_dir: str, prompts: int, samples: int, alternatives: int, seed: int) -> dict:
    from bench.harness.teachers import PAIRINGS
    from node.config import load_config
    from node.distill.score import pieces_of_token_bytes, score_chunks_for_requester
    from node.node import Node
    from node.round.align import sender_token_bytes

    student_spec, _ = PAIRINGS[pairing]
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        nodes = []
        for name, spec in (("s", student_spec), ("t", teacher_dir)):
            cfg = load_config(CONFIG, {"model.spec": spec, "torch_threads": 1, "eval.every": 0, "tasks.seed": seed,
                                       "metrics.console": False, "generation.prompts_per_round": prompts,
                                       "generation.group_size": samples, "tasks.eval_size": 8})
            nodes.append(Node(cfg, f"{tmp}/{name}"))
        student, teacher = nodes
        tok, pad = student.tokenizer, student.tokenizer.pad_token_id
        eos = tok.eos_token_id
        tasks = student.tasks.sample(0, prompts)
        texts = [student.prompt_of(t) for t in tasks]
        torch.manual_seed(seed)
        gen = student.generator.generate(texts, samples)
        rows, n_noncanon, n_all, mass_other, skipped = [], 0, 0, [], 0
        for prompt, group in zip(texts, gen.groups):
            prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
            for c in group:
                if "\ufffd" in c.text or not c.text:
                    continue
                sampled = list(c.token_ids)
                ended = bool(sampled) and sampled[-1] == eos
                canon = tok(c.text, add_special_tokens=False)["input_ids"] + ([eos] if ended else [])
                n_all += 1
                splits = [canon] + ([sampled] if sampled != canon else [])
                n_noncanon += sampled != canon
                splits += [a for a in _alternatives(tok, canon, alternatives, rng) if a not in splits]
                slps = _student_logps(student.model, pad, prompt_ids, splits)
                byte_counts = [sender_token_bytes(tok, c.text, s) for s in splits]
                pieces = [pieces_of_token_bytes(c.text, b) if b else None for b in byte_counts]
                if any(p is None for p in pieces):  # a split whose tokens do not cut the text into strings
                    skipped += 1
                    continue
                per_split = {}
                for mode in ("requester", "canonical"):
                    answers = score_chunks_for_requester(teacher.model, teacher.tokenizer, prompt, [c.text] * len(splits),
                                                         pieces, same_tokenizer=False, max_tokens=1 << 20, split=mode)
                    per_split[mode] = [None if v is None else _signals(v, ch, lp)
                                       for (v, ch), lp in zip(answers, slps)]
                totals = [sum(lp) for lp in slps]
                marginal = torch.logsumexp(torch.tensor(totals), 0).item()
                mass_other.append(1 - math.exp(totals[0] - marginal))
                rows.append({"noncanonical": sampled != canon, "totals": totals, "marginal": marginal,
                             "signals": per_split, "n_splits": len(splits), "sampled_index": splits.index(sampled)})
        for node in nodes:
            node.close()
    return {**summarise(pairing, rows, n_noncanon, n_all, mass_other), "skipped": skipped}


def summarise(pairing: str, rows: list[dict], n_noncanon: int, n_all: int, mass_other: list[float]) -> dict:
    out = {"pairing": pairing, "completions": n_all, "noncanonical_share": n_noncanon / max(n_all, 1),
           "other_split_mass": statistics.fmean(mass_other) if mass_other else None}
    for mode in ("requester", "canonical"):
        d_chunk, d_dpca, d_lt, d_ls, sizes, tokens = [], [], [], [], [], []
        for r in rows:
            sig = r["signals"][mode]
            if sig[0] is None:
                continue
            sizes += sig[0]["sizes"]
            for s in sig[1:]:
                if s is None:
                    continue
                d_chunk.append(s["chunk"] - sig[0]["chunk"])
                d_dpca.append(s["dpca"] - sig[0]["dpca"])
                d_lt.append(s["L_T"] - sig[0]["L_T"])
                d_ls.append(sig[0]["L_S"] - s["L_S"])
                tokens.append(len(s["sizes"]))
        m = statistics.fmean
        out[mode] = {"alternatives": len(d_chunk),
                     "pay_minus_canonical": {"chunk": m(d_chunk) if d_chunk else None,
                                             "dpca": m(d_dpca) if d_dpca else None, "marginal": 0.0},
                     "pay_minus_canonical_positive_share": {"chunk": m(x > 0 for x in d_chunk) if d_chunk else None,
                                                            "dpca": m(x > 0 for x in d_dpca) if d_dpca else None},
                     "student_logp_canonical_minus_other": m(d_ls) if d_ls else None,
                     "teacher_L_T_other_minus_canonical": m(d_lt) if d_lt else None,
                     "teacher_L_T_abs_change": m(abs(x) for x in d_lt) if d_lt else None,
                     "chunk_sizes": {str(k): sizes.count(k) for k in sorted(set(sizes))}}
    sampled_other = [r for r in rows if r["noncanonical"] and r["signals"]["canonical"][0] is not None]
    out["sampled_noncanonical_pay_minus_canonical_dpca"] = (
        statistics.fmean(r["signals"]["canonical"][r["sampled_index"]]["dpca"] - r["signals"]["canonical"][0]["dpca"]
                         for r in sampled_other) if sampled_other else None)
    return out


def dynamic(pairing: str, tdir: str, seeds: list[int], rounds: int, signals: list[str], jobs: int) -> list[dict]:
    """A few rounds of distillation (the teacher bench's OPD arm, bench.harness.teachers) per signal, and the same with λ = 0 (the
    student asks and is scored, and nothing of it is trained on): the share of the student's scored completions not
    split canonically, and its KL to the teacher, round by round."""
    from bench.harness.pool import run_jobs
    from bench.harness.teachers import run_one

    arms = [(sig, 1.0) for sig in signals] + [("chunk", 0.0)]
    jobs_ = [{"pairing": pairing, "arm": "OPD", "seed": s, "rounds": rounds, "teacher_dir": tdir, "coef": coef,
              "set": {"distill.cross_signal": sig, "distill.coef": coef}} for s in seeds for sig, coef in arms]
    runs = run_jobs(run_one, jobs_, RESULTS / "split_bias_dynamic.jsonl", jobs, lambda r: (
        f"{r['set']} seed {r['seed']}: off-split {r['distill_off_split']}"))
    return [{"signal": r["set"]["distill.cross_signal"], "coef": r["set"]["distill.coef"], "seed": r["seed"],
             "gain": r["gain"],
             "off_split": r["distill_off_split"], "kl": r["distill_kl"]} for r in runs]


def paired(base: str, new: str) -> dict:
    """The OPD runs of bench/results/learning/NEW.jsonl against BASE.jsonl's (bench.learning.teacher), paired by
    pairing and seed: held-out gain, and the mean off-split share over each run's scored rounds, NEW − BASE, with 95 %
    t-intervals (docs/benchmarks/learning.md §12F, the rule written before the runs)."""
    from bench.harness.output import load_jsonl
    from bench.harness.stats import interval

    def runs(name: str) -> dict:
        return {(r["pairing"], r["seed"], r["rounds"]): r for r in load_jsonl(RESULTS / f"{name}.jsonl") if r["arm"] == "OPD"}

    def off(r: dict) -> float | None:
        xs = [x for x in r.get("distill_off_split") or [] if x is not None]
        return statistics.fmean(xs) if xs else None

    a, b = runs(base), runs(new)
    keys = sorted(set(a) & set(b))
    out = {"base": base, "new": new, "seeds": [k[1] for k in keys], "per_seed": []}
    for key in keys:
        out["per_seed"].append({"pairing": key[0], "seed": key[1], "rounds": key[2], "gain": b[key]["gain"] - a[key]["gain"],
                                "off_split": None if off(b[key]) is None or off(a[key]) is None else off(b[key]) - off(a[key]),
                                "off_split_base": off(a[key]), "off_split_new": off(b[key])})
    for what in ("gain", "off_split"):
        d = [r[what] for r in out["per_seed"] if r[what] is not None]
        if len(d) >= 2:
            m, h = interval(d)
            out[what] = {"mean": m, "ci": h, "seeds": len(d), "positive": sum(x > 0 for x in d)}
    return out


def main(argv: list[str] | None = None) -> None:
    from bench.harness.teachers import PAIRINGS, TEACHER_ROUNDS, teacher_dir

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairings", nargs="+", choices=["spell2wide", "wide2spell"], default=["spell2wide", "wide2spell"])
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--alternatives", type=int, default=4, help="other splits of each completion's canonical split")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--teacher-rounds", type=int, default=TEACHER_ROUNDS,
                    help="the teacher's training rounds; 0: the teacher's model as built")
    ap.add_argument("--name", default="split_bias")
    ap.add_argument("--dynamic", type=int, default=0, metavar="ROUNDS",
                    help="instead: ROUNDS rounds of distillation per --signals and with λ 0 (dynamic())")
    ap.add_argument("--signals", nargs="+", default=["chunk"], choices=["chunk", "dpca", "exact"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--paired", nargs=2, metavar=("BASE", "NEW"),
                    help="instead: NEW's OPD runs (bench.learning.teacher --name NEW) against BASE's, paired by seed")
    args = ap.parse_args(argv)
    if args.paired:
        out = paired(*args.paired)
        for what in ("gain", "off_split"):
            if what in out:
                s = out[what]
                print(f"{out['new']} − {out['base']}, {what}: {s['mean']:+.4f} ± {s['ci']:.4f} "
                      f"({s['positive']}/{s['seeds']} seeds > 0)")
        print(f"wrote {write_json(args.name, out, RESULTS)}")
        return
    if args.dynamic:
        tdir = str(teacher_dir(PAIRINGS[args.pairings[0]][1], args.teacher_rounds))
        out = dynamic(args.pairings[0], tdir, args.seeds, args.dynamic, args.signals, args.jobs)
        print(f"wrote {write_json(args.name, {'args': vars(args), 'runs': out}, RESULTS)}")
        return
    results = []
    for p in args.pairings:
        spec = PAIRINGS[p][1]
        tdir = spec if args.teacher_rounds == 0 else str(teacher_dir(spec, args.teacher_rounds))
        results.append(measure(p, tdir, args.prompts, args.samples, args.alternatives, args.seed))
        print(results[-1], flush=True)
    print(f"wrote {write_json(args.name, {'args': vars(args), 'results': results}, RESULTS)}")


if __name__ == "__main__":
    main()
