"""Does a stronger peer teach? A student with a trained teacher's groups against the same student alone.

The teacher is a lab model trained alone to its plateau (examples/lab-solo.yaml, `--teacher-rounds`
rounds, partial credit) and then **frozen** (lr 0: it keeps sampling from the same policy, so every
seed sees the same teacher). The student is a fresh lab model. Task: spell_backward, 3–6 letters
(the lab models' own task) under the **binary** reward (exact match only) with groups of equal
reward dropped (`select.drop_zero_advantage`): a teacher's group can carry signal where the
student's own group on a task is all wrong. Pairings (student ← teacher):

  same        lab-spell      ← lab-spell trained        (same architecture and tokenizer)
  wide2spell  lab-spell      ← lab-spell-wide trained   (another tokenizer: rows re-tokenised,
  spell2wide  lab-spell-wide ← lab-spell trained         weighted by the chunk ratio, ARCHITECTURE §6)

Arms, for the student (node 0; I own + J the other node's groups trained, G generated per round):

  D  4 / 0, G 4    alone
  T  4 / 4, G 4    with the frozen teacher's groups (equal student generation with D)
  P  4 / 4, G 4    with a fresh, learning peer of the teacher's model instead (is it the teacher's
                   strength or any second node?)
  A  8 / 0, G 8    alone at twice the generation (equal trained rows with T)

Compute: T, P and D generate the same tokens on the student (the teacher's generation is its own);
T and A train on the same number of groups. Every arm of a seed uses the same student task stream
(tasks.seed = 100·seed) and the same held-out items (tasks.eval_size items, eval.samples each).

  Tn 4 / 4, G 4    T with the student's loss NoIS (the teacher's rows at weight 1, as if on-policy;
                   added after the first half of the T runs showed no gain, to test why: the
                   importance weight π/μ makes the teacher's rows estimate the student's own on-policy
                   gradient, so an unbiased weight can only lower variance, never move the student
                   towards the teacher faster)

Decision rule, fixed before the runs (per pairing, 8 seeds, paired by seed, 95 % t-interval on the
difference of held-out exact-match gains):
  the teacher teaches          T − D > 0 with an interval that excludes 0
  more than any peer           T − P > 0 with an interval that excludes 0
  (Tn, fixed before its runs)  Tn − D > 0 with an interval that excludes 0: the teacher teaches
                               when its rows are not importance-weighted
  (same@50, fixed before its runs) with a teacher trained 50 rounds instead of 200 (`--teacher-rounds
                               50`: stronger than the student, but nearer to it than the 200-round
                               teacher's KL(μ‖π) ≈ 0.6 nats per token), T − D > 0 excluding 0: the
                               distance between teacher and student is what keeps the rows useless
  Ti 4 / 4, G 4    T with the student's loss F-TIS + imitation of the teacher's rows whose advantage is
                   positive (`train.imitate: 1`, losses/imitation.py; lam 1: those rows pushed up at weight 1,
                   the wrong ones left to F-TIS; added after Tn showed that all of the teacher's rows
                   at weight 1 harm, to separate its right answers from its wrong ones)
  (Ti, fixed before its runs) Ti − D > 0 with an interval that excludes 0: the teacher teaches by
                               imitation; Ti − T > 0 likewise: imitation adds to F-TIS (same
                               pairing first, 8 seeds; the other pairings if time allows)
  Pi 4 / 4, G 4    P with Ti's loss: imitation of a fresh, learning peer's better answers (added after
                   Ti − D and Ti − T came out positive, before its runs)
  (Pi, fixed before its runs) Ti − Pi > 0 with an interval that excludes 0: the gain comes from the
                               teacher's strength, not from imitating any peer
  Ti0 4 / 4, G 4   Ti with an untrained teacher: the teacher's model as built (the student's own
                   starting point for `same`), frozen and sending 8 groups a round exactly as the
                   trained teacher does (added because the fresh peer of Pi sends fewer groups than
                   the teacher: Ti − Pi mixed the teacher's strength with the number of rows imitated)
  (Ti0, fixed before its runs) Ti − Ti0 > 0 with an interval that excludes 0: the gain is the
                               teacher's strength, at the same protocol and sending rate; the peer
                               groups each arm trained on are reported beside it
  Di  4 / 0, G 4   D with the same imitation term on the student's own above-mean answers
                   (`train.imitate_rows: all`; added after Ti − Ti0 came out unresolved, before its runs:
                   is the gain the peer's answers, or the extra push on successes the term gives anyway?)
  (Di, fixed before its runs)  Ti − Di > 0 and Ti0 − Di > 0, each with an interval that excludes 0: a
                               peer's answers add to what imitating one's own successes gives
Pairings with SmolLM2-135M (LoRA, examples/hetero/smollm2.yaml; 100 held-out items × 2 samples for it; the
lab node beside it extracts leniently as SmolLM2 does and accepts its longer completions):
  lab2smol    SmolLM2        ← lab-spell trained        (a 0.7M-parameter teacher, a 135M student that
                                                          almost never spells a word exactly backwards)
  smol2lab    lab-spell      ← SmolLM2 as built          (not trained here: ≈ 30 s a round; on exact match
                                                          it is no teacher, run because both directions count)
  (SmolLM2 pairings, fixed before their runs; arms D T Ti, 8 seeds, `--rounds 20 --name teacher_smollm2`)
                               per direction, T − D > 0 and Ti − D > 0, each with an interval that
                               excludes 0: the other model teaches (through F-TIS rows, by imitation)
  (the same under partial credit, fixed before its runs: `--set tasks.reward=partial --measure score_gain
                               --name teacher_smollm2_partial`, lab2smol first, arms D and Ti before T)
                               Ti − D > 0 and T − D > 0 on SmolLM2's held-out mean score, each
                               with an interval that excludes 0
  (smol2lab under partial credit, fixed before its runs: same flags, arms D and Ti, 8 seeds)
                               Ti − D > 0 on the lab student's held-out mean score, with an interval
                               that excludes 0: SmolLM2's better answers teach the lab student (its
                               mean score is ≈ 0.05–0.08, §12B: a weaker model on this task);
                               Ti − D < 0 excluding 0: imitating them harms
  Tio 4 / 4, G 4   Ti with `train.imitate_bar: own`: a peer's answer is imitated only if it also beats the
                   mean reward of the student's own rows in the step (added after the first smol2lab Ti runs
                   lost 0.10–0.21 of the lab student's held-out score, before its runs)
  (Tio on smol2lab, partial credit, fixed before its runs: 8 seeds)
                               Tio − Ti > 0 with an interval that excludes 0: the own bar keeps a
                               weaker model's answers from harming; Tio − D reported beside it (an
                               interval below 0 would mean harm remains)
  OPD  4 / 0, G 4   D plus on-policy distillation from the trained teacher: each round the student sends its own
                   completions to the teacher (`distill.teachers`, the score stream of the in-memory twin), which
                   answers log π_T of each of the student's tokens (across tokenizers: chunk log-probabilities
                   spread over the student's tokens); the student's token advantages get −λ·(log π_old − log π_T)
                   (losses/distill.py, λ = `--coef`). No peers' groups are trained on; the teacher's budget is set
                   far above what the twin asks (serving limits are tested elsewhere)
  OPD0 4 / 0, G 4  OPD with the teacher's model as built (the student's own starting point for `same`): the
                   strength control, at the same protocol and the same λ
  (OPD, fixed before its runs; λ chosen on seeds 100–101 of `same` with `--name teacher_opd_pilot`, never on
   seeds 0–7; 8 seeds, `--name teacher_opd`)
                               same: OPD − D > 0 with an interval that excludes 0 (the goal is ≥ +0.10), and
                               OPD − OPD0 > 0 with an interval that excludes 0: the teacher's strength is what
                               teaches; wide2spell and spell2wide: OPD − D > 0 with an interval that excludes 0.
                               (λ = 1: on seeds 100–101, OPD − D was −0.008 at λ 1 and −0.028 at λ 3,
                               `teacher_opd_pilot*.json`; Ti is not rerun: §12D's stored Ti runs are the
                               reference, from other code)
  (chunk gaps, fixed before their runs: wide2spell and spell2wide rerun with the student's gap taken per chunk of
   text, d_c on every token of chunk c (losses/distill.py), after the per-token spread above made the student's KL
   to the teacher GROW in both pairings; `--name teacher_opd_chunks`, arms D OPD OPD0, 8 seeds)
                               OPD − D > 0 with an interval that excludes 0 in each pairing, and OPD − OPD0
                               reported beside it
                               Also reported: the student's KL to the teacher on its scored tokens in the first
                               and last 5 rounds, student tokens scored and teacher tokens computed per student
                               token generated
  (the requester split, fixed before its runs: the teacher scores its tokenization of each student token alone,
   concatenated, and its own EOS where the student's completion ended — `distill.score_split: requester`,
   node/distill/score.py — so that on the byte path it scores the events the student sampled, where `canonical`
   scored its own tokenization of the whole text; 8 seeds each)
     (i) the byte path itself, one tokenizer: `--pairings same --arms D OPD --set distill.send_ids=false`, once
         with `--name teacher_opd_bytes` (canonical) and once with `--set distill.score_split=requester --name
         teacher_opd_bytes_split`; paired by seed with `--paired` against teacher_opd's OPD (token ids):
                               the canonical byte path is what harms if OPD[bytes] − OPD[ids] < 0 with an
                               interval that excludes 0; the split repairs it if OPD[bytes split] − OPD[bytes] > 0
                               with an interval that excludes 0 (OPD[bytes split] − OPD[ids] reported beside)
     (ii) across tokenizers: `--pairings spell2wide --arms D OPD OPD0 --set distill.score_split=requester --name
         teacher_opd_split`:
                               OPD − D > 0 with an interval that excludes 0: the teacher teaches across
                               tokenizers; OPD − OPD0 and the KL first → last reported beside it, and OPD paired
                               against teacher_opd_chunks's OPD (canonical, the same chunk gaps)
     (iii) after (i) and (ii): the student's EOS had joined the chunk of its last text token, so the teacher's
         EOS log-probability (≈ −7 after "</answer>": the 200-round teacher rambles on) was charged to that
         token too; now both EOS are a chunk of their own, and one tokenizer on the byte path gives exactly the
         id path's values (96 sampled completions checked). Rerun, fixed before the runs, `--name
         teacher_opd_bytes_split2` (as (i)) and `--name teacher_opd_split2` (as (ii)):
                               same: OPD[bytes split] − OPD[ids] within ±0.01 (the byte path then carries no
                               harm of its own); spell2wide: OPD − D > 0 with an interval that excludes 0
     (iv) after (iii), which matched the id path for four rounds and then fell behind it on every seed: a special
         token of the student's (EOS, padding) inside a chunk of text put its own log-probability into the chunk's
         gap with nothing of the teacher's against it, so the gap rewarded sampling it the less likely it was;
         such tokens are now left unscored (node.distill.student). Rerun, fixed before the runs, `--name
         teacher_opd_bytes_split3` (as (i), split) and `--name teacher_opd_split3` (as (ii)):
                               same: OPD[bytes split] − OPD[ids] within ±0.01; spell2wide: OPD − D > 0 with an
                               interval that excludes 0
     (v) after (iv), whose same-tokenizer runs equalled (iii)'s on 7 of 8 seeds: the student's completions and the
         teacher's values, compared token by token on seed 0, first differ where the student sampled a byte that
         is no UTF-8 text; its text holds U+FFFD there, which the teacher scores as three bytes (−34.7 against
         −10.8 for the byte itself) and every later token after them. Such completions are now unscored on the
         byte path. Rerun, fixed before the runs, `--name teacher_opd_bytes_split4` and `--name teacher_opd_split4`,
         with (iv)'s rules
  (a teacher that ends, fixed before its runs: the 200-round teacher rambles after "</answer>" up to
   max_new_tokens — log π_T(EOS) there ≈ −7, about 6 nats a completion on the untrained student's samples, most
   of the student's first KL to it (corrected after the runs: first written as "6 of ≈ 15.6 nats of KL", but
   15.6 is the teacher's log-probability of a completion, not the KL) — so the id path teaches the student to
   ramble on as much as to answer. A teacher trained the same 200 rounds with `train.mask_truncated: true` (DAPO's overlong filtering: completions
   that hit max_new_tokens leave the loss, so only those that end are reinforced): `--teacher-set
   train.mask_truncated=true --pairings same --arms D OPD OPD0 --name teacher_opd_ends`, 8 seeds)
                               OPD − D > 0 with an interval that excludes 0 (a teacher that ends teaches), and
                               OPD − OPD0 > 0 likewise; the teacher's held-out accuracy reported beside them
  (the reverse pairing with a stronger teacher, fixed before its runs: lab-spell-wide trained 200 rounds holds
   0.39–0.40, no stronger than the lab-spell student; trained 600 rounds (`--teacher-rounds 600`), it is used
   only if its held-out exceeds what the student reaches alone in 40 rounds; then `--pairings wide2spell --arms
   D OPD OPD0 --teacher-rounds 600 --name teacher_opd_wide600`, 8 seeds)
                               OPD − D > 0 with an interval that excludes 0
Pairings of two pretrained models across tokenizers (SmolLM2-135M-Instruct and Gemma 3 270M base, each + LoRA,
examples/hetero/smollm2.yaml and gemma3.yaml; each teacher as built, neither trained as a teacher here):
  gemma2smol  SmolLM2        ← Gemma 3 270M as built
  smol2gemma  Gemma 3 270M   ← SmolLM2 as built
  (the pretrained pair, fixed before its runs: `--set tasks.reward=partial --measure score_gain --rounds 20
   --name teacher_gemma`, arms D and OPD, `distill.cross_signal` at its default)
                               per direction, OPD − D > 0 with an interval that excludes 0: the other
                               pretrained model teaches by on-policy distillation; < 0 excluding 0: it harms;
                               fewer than 8 seeds: reported as measured (with the wall time), no verdict
Also reported: the mean IS weight on the teacher's rows (`ext_w`), the share of those weights
≥ 0.1, the share of rows the F-TIS filter zeroed, and KL(μ_teacher‖π_student) per token on the
teacher's rows (k3 estimate, `kl_beh_external`), averaged over the rounds that used any.

    python -m bench.learning.teacher --pairings same wide2spell spell2wide --seeds 0 1 2 3 4 5 6 7 --jobs 2

Runs are appended to bench/results/learning/teacher.jsonl as they finish (an interrupted invocation resumes);
the table goes to bench/results/learning/teacher.json. The teachers are trained once, on first use, into
`$SWARM_CACHE_DIR/bench/teachers/` (≈ 2 minutes each).
"""

from __future__ import annotations

import argparse
import statistics

from bench.harness.arms import Rule, cells, compare, judge, run_arms
from bench.harness.options import parse_value
from bench.harness.output import load_jsonl, results_dir, table, write_json
from bench.harness.stats import interval
from bench.harness.teachers import ARMS, DISTILL, OPD_COEF, PAIRINGS, TEACHER_ROUNDS, run_one, teacher_dir

RESULTS = results_dir("learning")
PAIRS = [("T", "D"), ("T", "P"), ("T", "A"), ("P", "D"), ("Tn", "D"), ("Tn", "T"), ("Ti", "D"), ("Ti", "T"), ("Pi", "P"),
         ("Ti", "Pi"), ("Ti", "Ti0"), ("Ti0", "D"), ("Di", "D"), ("Ti", "Di"), ("Ti0", "Di"), ("Tio", "Ti"), ("Tio", "D"),
         ("OPD", "D"), ("OPD", "OPD0"), ("OPD0", "D"), ("OPD", "Ti")]  # a − b, paired by seed within a pairing


def label(pairing: str, arm: str, teacher_rounds: int) -> str:
    """The pairing's name, with `@rounds` for a teacher trained another number of rounds than the default."""
    return pairing if ARMS[arm][3] != "teacher" or teacher_rounds == TEACHER_ROUNDS else f"{pairing}@{teacher_rounds}"


def _m(xs):
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else float("nan")


def _scored_kl(kls: list[float]) -> list[float]:
    """A run's per-round KL without the rounds nobody scored: runs before the harness skipped them recorded such a
    round (round 0 across tokenizers: the teacher refuses our ids first) as exactly 0.0, which no estimate is."""
    return [x for x in kls if x != 0.0]


def summarise(runs: list[dict], measure: str = "gain") -> tuple[list[dict], list[dict]]:
    """Per arm and paired differences of `measure`: gain (held-out exact match) or score_gain (mean verifier score)."""
    runs = [{**r, "gain": r[measure]} for r in runs]
    rows, diffs = [], []
    for pairing in dict.fromkeys(r["pairing"] for r in runs):
        for arm in ARMS:
            rs = [r for r in runs if r["pairing"] == pairing and r["arm"] == arm]
            if not rs:
                continue
            g, gh = interval([r["gain"] for r in rs])
            rows.append({"pairing": pairing, "arm": arm, "seeds": len(rs), "before": _m(r["before"][0] for r in rs),
                         "gain": g, "gain_ci": gh, "other_acc": _m(r["after"][1] if len(r["after"]) > 1 else None
                                                                   for r in rs),
                         "peer_groups": _m(r["external_groups"] for r in rs), "ext_w": _m(r["ext_w"] for r in rs),
                         "w_share": _m(r["w_share"] for r in rs), "filtered": _m(r["filtered"] for r in rs),
                         "kl": _m(r["kl"] for r in rs), "mtok_gen": _m(r["tokens_generated"] for r in rs) / 1e6,
                         "mtok_trained": _m(r["tokens_trained"] for r in rs) / 1e6})
            if arm in DISTILL:
                kls = [_scored_kl(r["distill_kl"]) for r in rs if r.get("distill_kl")]
                rows[-1].update(distill_kl_first=_m(_m(k[:5]) for k in kls if k),
                                distill_kl_last=_m(_m(k[-5:]) for k in kls if k),
                                scored_per_gen=_m(r["distill_tokens_scored"] / r["tokens_generated"] for r in rs),
                                teacher_per_gen=_m(r["teacher_tokens_computed"] / r["tokens_generated"] for r in rs),
                                seconds=_m(r["seconds"] for r in rs))
        by = cells([r for r in runs if r["pairing"] == pairing], ("arm",))
        diffs += compare(by, [((a,), (b,)) for a, b in PAIRS], ("gain",), per_seed="gain",
                         label=lambda a, b, p=pairing: {"pairing": p, "pair": f"{a[0]} − {b[0]}"})
    return rows, diffs


def paired_with(runs: list[dict], arm: str, other: str, measure: str = "gain") -> list[dict]:
    """ARM of `runs` − the arm named in `other` ("NAME:ARM") of bench/results/learning/NAME.jsonl, per pairing,
    paired by seed (same rounds)."""
    name, _, other_arm = other.partition(":")
    other_arm = other_arm or arm
    rounds = {r["rounds"] for r in runs}
    theirs = [r for r in load_jsonl(RESULTS / f"{name}.jsonl") if r["arm"] == other_arm and measure in r
              and r["rounds"] in rounds]
    by = {**{("ours", p): rs for (p,), rs in cells([r for r in runs if r["arm"] == arm and measure in r],
                                                    ("pairing",)).items()},
          **{("theirs", p): rs for (p,), rs in cells(theirs, ("pairing",)).items()}}
    pairs = [(("ours", p), ("theirs", p)) for p in dict.fromkeys(r["pairing"] for r in runs)]
    return compare(by, pairs, (measure,), per_seed=measure,
                   label=lambda a, b: {"pairing": a[1], "pair": f"{arm} − {name}:{other_arm}"})


RULES = [Rule("T − D", "the teacher teaches"), Rule("T − P", "more than any peer"),
         Rule("Tn − D", "the teacher teaches without importance weights"),
         Rule("Ti − D", "the teacher teaches by imitation of its better answers"),
         Rule("Ti − T", "imitation adds to F-TIS"),
         Rule("Ti − Pi", "by the teacher's strength, not imitation of any peer"),
         Rule("Ti − Ti0", "by the teacher's strength, at the same sending rate"),
         Rule("Ti − Di", "the teacher's answers add to imitating one's own"),
         Rule("Ti0 − Di", "an untrained copy's answers add to imitating one's own"),
         Rule("Tio − Ti", "the own bar does better than the group bar"),
         Rule("Tio − D", "the teacher teaches by imitation under the own bar"),
         Rule("OPD − D", "the teacher teaches by on-policy distillation"),
         Rule("OPD − OPD0", "by the teacher's strength (distillation from an untrained copy as the control)")]


def verdicts(diffs: list[dict]) -> list[str]:
    """The decision rules of the module docstring, per pairing."""
    return judge(diffs, RULES, prefix=lambda d: f"{d['pairing']}: ")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairings", nargs="+", choices=sorted(PAIRINGS), default=["same", "wide2spell", "spell2wide"])
    ap.add_argument("--arms", nargs="+", choices=sorted(ARMS), default=list(ARMS))
    ap.add_argument("--seeds", nargs="+", type=int, default=list(range(8)))
    ap.add_argument("--rounds", type=int, default=40, help="student rounds")
    ap.add_argument("--teacher-rounds", type=int, default=TEACHER_ROUNDS,
                    help="rounds the teacher trains alone (another value: pairing NAME@ROUNDS in the tables)")
    ap.add_argument("--coef", type=float, default=OPD_COEF, help="λ of the distillation arms (OPD, OPD0); runs "
                    "with another λ must go to another --name")
    ap.add_argument("--jobs", type=int, default=1, help="swarms run side by side (one core each)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="an override for every node of every run, e.g. tasks.reward=partial (SmolLM2's measurable "
                    "regime); runs with other overrides must go to another --name")
    ap.add_argument("--teacher-set", action="append", default=[], metavar="KEY=VALUE",
                    help="an override of the teacher's own training run (it gets a cache folder of its own), e.g. "
                    "train.mask_truncated=true; runs with it must go to another --name")
    ap.add_argument("--measure", choices=["gain", "score_gain"], default="gain",
                    help="what the tables compare: held-out exact match (gain) or mean verifier score (score_gain: "
                    "SmolLM2 under partial credit, whose exact match stays 0)")
    ap.add_argument("--report", action="store_true", help="only summarise bench/results/learning/<name>.jsonl")
    ap.add_argument("--paired", nargs=2, action="append", default=[], metavar=("ARM", "OTHER:ARM"),
                    help="also pair ARM of these runs with ARM of the runs in bench/results/learning/OTHER.jsonl "
                    "(same pairing, seed and rounds), e.g. --paired OPD teacher_opd:OPD")
    ap.add_argument("--name", default="teacher", help="results: bench/results/learning/<name>.jsonl and <name>.json; a new "
                    "name for runs that must not pair with earlier ones (e.g. after the lab model was rebuilt)")
    args = ap.parse_args(argv)
    sets, teacher_sets = {}, {}
    for flag, items, into in (("--set", args.set, sets), ("--teacher-set", args.teacher_set, teacher_sets)):
        for item in items:
            key, eq, value = item.partition("=")
            if not eq or not key:
                raise SystemExit(f"bench.learning.teacher: {flag} wants KEY=VALUE, not {item!r}")
            into[key] = parse_value(value)
    sink_path = RESULTS / f"{args.name}.jsonl"
    if args.report:
        done = load_jsonl(sink_path)
    else:
        teachers = {spec: str(teacher_dir(spec, args.teacher_rounds, teacher_sets))
                    for spec in {PAIRINGS[p][1] for p in args.pairings}}
        jobs = [{"pairing": label(p, a, args.teacher_rounds), "arm": a, "seed": s, "rounds": args.rounds,
                 "teacher_dir": teachers[PAIRINGS[p][1]], "set": sets, "coef": args.coef}
                for s in args.seeds for p in args.pairings for a in args.arms]
        done = run_arms(run_one, jobs, sink_path, args.jobs, lambda r: (
            f"{r['pairing']} {r['arm']} seed {r['seed']}: gain {r['gain']:+.3f}, score {r['score_gain']:+.3f} "
            f"(peer groups {r['external_groups']}, ext w {r['ext_w']})"), key=("pairing", "arm", "seed", "rounds"))
    runs = [r for r in done if r["rounds"] == args.rounds and r["pairing"].partition("@")[0] in args.pairings]
    for r in [r for r in runs if "@" in r["pairing"]]:  # a teacher of other rounds: against the same D, P and A
        runs += [{**x, "pairing": r["pairing"]} for x in runs if x["pairing"] == r["pairing"].partition("@")[0]
                 and x["arm"] in ("D", "P", "A") and x["seed"] == r["seed"]]
    rows, diffs = summarise([r for r in runs if args.measure in r], args.measure)
    print(table(rows, list(dict.fromkeys(k for r in rows for k in r))) if rows else "no runs")
    print(table(diffs, list(diffs[0])) if diffs else "")
    for line in verdicts(diffs):
        print(line)
    across = [d for arm, other in args.paired for d in paired_with(runs, arm, other, args.measure)]
    if across:
        print(table(across, list(across[0])))
    path = write_json(args.name, {"args": vars(args), "rows": rows, "diffs": diffs, "verdicts": verdicts(diffs),
                                  "paired": across}, RESULTS)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
