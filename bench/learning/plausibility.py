"""What `train.peer_token_floor` would take from an honest peer: a node's own sampled rows, against the floor.

An honest peer running the same model sends rows sampled as the node's own are, so the node's own rows
show what the floor (losses/peer_floor.py) would take from such a peer: per config, `--prompts` groups
generated as its round generates them (its model, sampling temperature and group size), and for each
floor p, the share of their tokens with π < p, of rows holding one, and of tokens span rest would cut
(the first such token and all after it) — over all rows and over the rows that scored above their
group's mean (those a positive advantage pushes up). Not a learning run: a description of the rows.

    python -m bench.learning.plausibility examples/lab-swarm.yaml examples/papers/sapo-binary.yaml \
        examples/smollm2-swarm.yaml --prompts 32                    # → bench/results/learning/plausibility.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics

from bench.harness.output import results_dir, write_json

RESULTS = results_dir("learning")

FLOORS = [0.01, 1e-3, 1e-4]


def plausibility(config: str, prompts: int, floors: list[float], seed: int = 0) -> dict:
    """What a floor would take from an honest peer of the same model: the node's own sampled rows (`prompts`
    groups of its config, its sampling temperature), the share of their tokens below each floor, of rows with
    one, and of tokens span rest would cut — over all rows and over those scoring above their group's mean."""
    import torch

    from node.config import load_config
    from node.generation.base import build_generator
    from node.models.load import load_model
    from node.tasks.source import TaskSource, render_prompt

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    cfg = load_config(config, {"tasks.eval_size": 0})
    lm = load_model(cfg.model.model_copy(update={"lora": None}))
    tasks = TaskSource(cfg.tasks)
    batch = tasks.sample(0, prompts)
    system = tasks.system_prompt()
    result = build_generator(cfg.generation, lm.model, lm.tokenizer).generate(
        [render_prompt(lm.tokenizer, t.question, system, t.messages) for t in batch], n=cfg.generation.group_size)
    rows = []  # (logprobs, above its group's mean)
    for t, group in zip(batch, result.groups):
        scores = tasks.score_group(t, [c.text for c in group])
        mean = statistics.fmean(scores)
        rows += [(list(c.logprobs), s > mean) for c, s in zip(group, scores)]
    out = {"config": config, "model": cfg.model.spec, "temperature": cfg.generation.temperature,
           "rows": len(rows), "rows_above_mean": sum(a for _, a in rows),
           "tokens_per_row": statistics.fmean(len(lp) for lp, _ in rows), "floors": {}}
    for p in floors:
        cut = math.log(p)
        per = {}
        for name, chosen in (("all", rows), ("above_mean", [r for r in rows if r[1]])):
            toks = [x for lp, _ in chosen for x in lp]
            first = [next((i for i, x in enumerate(lp) if x < cut), len(lp)) for lp, _ in chosen]
            per[name] = None if not chosen else {
                "tokens_below": sum(x < cut for x in toks) / len(toks),
                "rows_with_one": sum(f < len(lp) for f, (lp, _) in zip(first, chosen)) / len(chosen),
                "rest_cuts": sum(len(lp) - f for f, (lp, _) in zip(first, chosen)) / len(toks)}
        out["floors"][str(p)] = per
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs", nargs="+")
    ap.add_argument("--prompts", type=int, default=32, help="groups generated per config")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    found = [plausibility(c, args.prompts, FLOORS, args.seed) for c in args.configs]
    print(json.dumps(found, indent=1))
    write_json("plausibility", {"args": vars(args), "configs": found}, RESULTS)


if __name__ == "__main__":
    main()
