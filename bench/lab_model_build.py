"""Build the lab-* models and measure what RL will start from, side by side.

For each lab model: parameters, SFT steps, build seconds, report-set accuracy sampled at T = 1
(the RL setting) and greedy (headroom), completion length, and the wall time of one round's
generation (B prompts × G completions with the node's own HF generator).

    python bench/lab_model_build.py [--cache-dir DIR] [--prompts 4] [--group-size 8]

Without --cache-dir the models are built from scratch in a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

from node.generation.config import GenerationConfig
from node.generation.hf import HFGenerator
from node.models.config import ModelConfig
from node.models.lab import LAB_RECIPES
from node.models.load import fetch, load_model
from node.tasks.config import DatasetSpec, TaskConfig
from node.tasks.source import TaskSource, render_prompt


def round_generation_seconds(
    alias: str, cache: Path, lab: dict, prompts: int, group: int
) -> tuple[float, float]:
    """(seconds, mean reward) of one round's generation: `prompts` × `group` sampled completions."""
    loaded = load_model(ModelConfig(spec=alias), cache_dir=cache)
    source = TaskSource(
        TaskConfig(datasets=[DatasetSpec(name=lab["dataset"], config=lab["config"])], system_prompt=None)
    )
    tasks = source.sample(0, prompts)
    texts = [render_prompt(loaded.tokenizer, t.question, None) for t in tasks]
    gen = HFGenerator(loaded.model, loaded.tokenizer, GenerationConfig(group_size=group, max_new_tokens=16))
    torch.manual_seed(0)
    result = gen.generate(texts, n=group)
    rewards = [source.score(t, c.text) for t, g in zip(tasks, result.groups) for c in g]
    return result.seconds, sum(rewards) / len(rewards)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=8)
    args = parser.parse_args()
    cache = args.cache_dir or Path(tempfile.mkdtemp(prefix="lab-bench-"))
    rows = []
    for alias in sorted(LAB_RECIPES):
        path = fetch(alias, cache_dir=cache, progress=print)
        lab = json.loads((path / "lab.json").read_text())
        seconds, reward = round_generation_seconds(alias, cache, lab, args.prompts, args.group_size)
        rows.append((alias, lab, seconds, reward))
    print(f"\n{'model':<14} {'steps':>5} {'build s':>7} {'sampled':>7} {'greedy':>6} {'tok/compl':>9} "
          f"{'round gen s':>11} {'round reward':>12}")  # fmt: skip
    for alias, lab, seconds, reward in rows:
        print(f"{alias:<14} {lab['steps']:>5} {lab['build_seconds']:>7.1f} {lab['sampled_accuracy']:>7.3f} "
              f"{lab['greedy_accuracy']:>6.3f} {lab['mean_completion_tokens']:>9.1f} {seconds:>11.2f} {reward:>12.3f}")  # fmt: skip
    print(f"(round = {args.prompts} prompts × {args.group_size} completions, T = 1; "
          f"torch threads {torch.get_num_threads()})")  # fmt: skip


if __name__ == "__main__":
    main()
