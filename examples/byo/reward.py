"""Reward functions for examples/byo/arithmetic.jsonl, with TRL's `reward_funcs` signature.

rlswarm calls each once per prompt group: `prompts` and every other column of the row (here
`answer` and `operation`) come as lists with one entry per completion; return one float each.
Every node scores its own *and its peers'* completions with its own copy of these functions.
"""

from __future__ import annotations

import re

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def exact_answer(prompts: list[str], completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """1.0 when the last <answer>…</answer> holds the row's answer (as an integer), else 0.0."""
    rewards = []
    for completion, expected in zip(completions, answer):
        found = _ANSWER.findall(completion)
        try:
            rewards.append(1.0 if found and int(found[-1].strip()) == int(expected) else 0.0)
        except ValueError:  # not an integer
            rewards.append(0.0)
    return rewards


def answer_tag(prompts: list[str], completions: list[str], **kwargs) -> list[float]:
    """1.0 for a completion that puts something inside <answer>…</answer> (a format reward)."""
    return [1.0 if _ANSWER.search(c) else 0.0 for c in completions]
