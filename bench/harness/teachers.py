"""The teacher bench's pairings and arms (bench/learning/teacher.py's docstring says what each is) and one run of
them: a student and its frozen teacher (or a peer) on the in-memory twin, `run_one`; the frozen teacher trained
once and cached, `teacher_dir` (behind a file lock: benches started side by side train it once).
bench/learning/teacher.py and bench/learning/split_bias.py run them."""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from pathlib import Path

PAIRINGS = {"same": ("lab-spell", "lab-spell"), "wide2spell": ("lab-spell", "lab-spell-wide"),  # (student, teacher)
            "spell2wide": ("lab-spell-wide", "lab-spell"),
            "lab2smol": ("smollm2-135m", "lab-spell"), "smol2lab": ("lab-spell", "smollm2-135m"),
            "gemma2smol": ("smollm2-135m", "gemma3-270m"), "smol2gemma": ("gemma3-270m", "smollm2-135m")}
# SmolLM2 runs its own config (LoRA, 4 completions a group, 32 new tokens, lenient extraction) with a smaller
# held-out set; it is never trained as a teacher here (≈ 30 s a round): as a teacher it is the model as built
SMOL, GEMMA = "smollm2-135m", "gemma3-270m"
PRETRAINED = (SMOL, GEMMA)  # teachers as built, never trained here (Gemma 3 270M: the pretrained pair with SmolLM2)
SPEC_CONFIG = {SMOL: ("examples/hetero/smollm2.yaml", {"tasks.eval_size": 100, "eval.samples": 2}),
               GEMMA: ("examples/hetero/gemma3.yaml", {"tasks.eval_size": 100, "eval.samples": 2})}
SMOL_PARTNER = {"tasks.extraction": "lenient", "ingest.max_completion_tokens": 64}  # the lab node beside SmolLM2
ARMS = {"D": (4, 0, 4, None), "T": (4, 4, 4, "teacher"), "P": (4, 4, 4, "peer"), "A": (8, 0, 8, None),
        "Tn": (4, 4, 4, "teacher"), "Ti": (4, 4, 4, "teacher"),
        "Pi": (4, 4, 4, "peer"), "Ti0": (4, 4, 4, "copy"), "Di": (4, 0, 4, None), "Tio": (4, 4, 4, "teacher"),
        "OPD": (4, 0, 4, "teacher"), "OPD0": (4, 0, 4, "copy")}
DISTILL = ("OPD", "OPD0")  # the student asks the frozen node (n1) to score its completions; it trains on no peer group
OPD_COEF = 1.0  # λ (--coef)
# Tn, Ti: T with another student loss; Pi: P with Ti's loss; Ti0: Ti with the teacher's model untrained ("copy");
# Di: D imitating its own above-mean answers; Tio: Ti with the own bar (train.imitate_bar: own, the node's default)
# F-TIS + imitation of peers' rows with A > 0 (losses/imitation.py), with the group bar these arms were run with
IMITATION = {"train.imitate": 1.0, "train.imitate_bar": "group"}
STUDENT_OVER = {"Tn": {"loss": {"name": "nois"}},  # arms whose student trains otherwise than TASK's F-TIS
                "Ti": IMITATION, "Pi": IMITATION, "Ti0": IMITATION,
                "Di": {**IMITATION, "train.imitate_rows": "all"},
                "Tio": {**IMITATION, "train.imitate_bar": "own"}}
CONFIG = "examples/lab-solo.yaml"
TEACHER_ROUNDS = 200
TASK = {"tasks.reward": "exact", "select.drop_zero_advantage": True, "tasks.eval_size": 400, "eval.samples": 4,
        "loss": {"name": "f-tis"}}


def teacher_dir(spec: str, rounds: int, over: dict | None = None) -> Path:
    """The frozen teacher's model folder: `spec` trained alone for `rounds` rounds, with `over` on top of its config
    (built on first use; a teacher trained with overrides has a folder of its own)."""
    from node.models.load import default_cache_dir

    if spec in PRETRAINED:  # as built: 200 rounds of SmolLM2 would take ≈ 2 hours here
        return spec
    tag = "".join(f"-{k}={v}" for k, v in sorted((over or {}).items()))
    root = default_cache_dir() / "bench" / "teachers" / f"{spec}-{rounds}{tag}"
    done = root / "model"
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.with_name(root.name + ".lock"), "w") as lock:  # a second bench wanting it waits, then reads it
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (done / "config.json").is_file():
            _train(spec, rounds, over or {}, root)
    return done


def _train(spec: str, rounds: int, over: dict, root: Path) -> None:
    """Train `spec` alone for `rounds` rounds and move its last checkpoint's model to root/model."""
    from node.books import checkpoint
    from node.config import load_config
    from node.node import Node
    from node.round.loop import run_round

    print(f"training the teacher {spec} for {rounds} rounds (once) ...", flush=True)
    cfg = load_config(CONFIG, {"model.spec": spec, "rounds": rounds, "torch_threads": 1, "eval.every": 0,
                               "checkpoint.every": rounds, "metrics.console": False, **over})
    work = root.with_name(root.name + ".work")
    shutil.rmtree(work, ignore_errors=True)  # a run cut short leaves it; under the lock nobody else uses it
    node = Node(cfg, str(work))
    started = time.perf_counter()
    try:
        for r in range(rounds):
            run_round(node, r)
            if (r + 1) % 50 == 0 or r + 1 == rounds:
                print(f"  teacher {spec}: round {r + 1}/{rounds}, {time.perf_counter() - started:.0f} s", flush=True)
    finally:
        node.close()
    newest = checkpoint.complete_checkpoints(work / "checkpoints")[-1]
    root.mkdir(parents=True, exist_ok=True)
    os.replace(newest / "model", root / "model")


def run_one(job: dict) -> dict:
    """One arm, one pairing, one seed: the student's (and the other node's) held-out gain and weights."""
    from bench.harness.models import build_of
    from bench.harness.swarm import run_swarm

    student, other = PAIRINGS[job["pairing"].partition("@")[0]]
    i, j, g, kind = ARMS[job["arm"]]
    started = time.perf_counter()
    partner = SMOL_PARTNER if {student, other} & set(PRETRAINED) else {}

    def node(spec: str, model: str) -> tuple[str, dict]:  # its config file, and TASK with its own adjustments
        config, extra = SPEC_CONFIG.get(spec, (CONFIG, partner))
        return config, {**TASK, **extra, **job.get("set", {}), "model.spec": model}

    config, base = node(student, student)
    configs, local, external, generate = [config], [i], [j], [g]
    over = [{**base, **STUDENT_OVER.get(job["arm"], {})}]
    if job["arm"] in DISTILL:
        over[0].update({"distill.teachers": ["n1"], "distill.coef": job.get("coef", OPD_COEF)})
    if kind:  # a frozen teacher (trained, or its model as built: "copy") generating 8 groups a round, or a fresh peer
        config, base = node(other, job["teacher_dir"] if kind == "teacher" else other)
        frozen = kind in ("teacher", "copy")
        configs.append(config)
        local, external, generate = local + [8 if frozen else i], external + [0 if frozen else j], \
            generate + [8 if frozen else g]
        over.append({**base, **({"train.lr": 0.0} if frozen else {})})
        if job["arm"] in DISTILL:  # the teacher serves scores; it generates one group a round (its groups are unused)
            over[-1].update({"distill.serve": True, "distill.serve_tokens_per_s": 1e9})
            local[-1] = generate[-1] = 1
    run = run_swarm(configs, local, external, job["seed"], job["rounds"], over, generate=generate)
    out = {**{k: job[k] for k in ("pairing", "arm", "seed", "rounds")}, "set": job.get("set", {})}
    # what each node ran (bench.harness.models.build_of): runs of two builds of a model do not pair
    out["build"] = {"student": build_of(student), **({"other": build_of(over[1]["model.spec"])} if kind else {})}
    out.update(gain=run["after"][0] - run["before"][0], before=run["before"], after=run["after"],
               score_gain=run["score_after"][0] - run["score_before"][0],
               external_groups=run["external_groups"][0], ext_w=run["external_weight"][0],
               w_share=run["external_share"][0], filtered=run["filtered"][0], kl=run["kl_external"][0],
               tokens_generated=run["tokens_generated"][0], tokens_trained=run["tokens_trained"][0],
               cum_reward=sum(run["curves"][0]), seconds=round(time.perf_counter() - started, 1),
               distill_kl=run["distill_kl"][0], distill_tokens_scored=run["distill_tokens_scored"][0],
               distill_bounds=run["distill_bounds"][0], distill_off_split=run["distill_off_split"][0],
               distill_gate=run["distill_gate"][0],
               teacher_tokens_computed=run["distill_served_computed"][1] if len(configs) > 1 else 0)
    return out
