"""Verifiable tasks from reasoning-gym: sampling, exact regeneration, prompts and rewards.

A task is named by a `TaskRef {dataset, config, seed, index}`. reasoning-gym datasets are
procedural and deterministic: item `index` of `create_dataset(dataset, seed=seed, **config)` is the
same question and ground truth on every machine, so a receiver regenerates every external task
itself and scores completions with its *own* verifier (docs/ARCHITECTURE.md §4). Claimed rewards are never used.

Answer extraction (documented in docs/CONFIG.md):
  - `strict`: the text inside the last `<answer>…</answer>` block, exactly as reasoning-gym's own
    `extract_answer` reads it, but in linear time (`extract_tagged`); no block ⇒ reward 0. This
    is what the system prompt asks for.
  - `lenient`: the tagged answer if present, else the last non-empty line of the completion.
    Useful to measure models that answer correctly but ignore the format.
The reward is the dataset's own `score_answer(answer, entry)` in [0, 1] (partial credit allowed).

Peers' text is hostile input, so verification is bounded before any dataset code runs:
reasoning-gym's regex `<answer>\\s?(.*?)\\s?</answer>` backtracks quadratically on an unclosed
`<answer>` repeated (measured: 32k characters 2.6 s, 128k 42 s); `extract_tagged` finds the same
block with `str.find` in one pass. An extracted answer longer than `max_answer_chars(task)` is a
wrong answer and never reaches the dataset's `score_answer`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from reasoning_gym.utils import SYSTEM_PROMPTS

from node.tasks.config import TaskConfig
from node.tasks.gym import INDEX_SPACE, build_dataset, check_config, config_key, dataset_names
from protocols.records import TaskRef

DATASET_NAMES = frozenset(dataset_names())



@dataclass(frozen=True)
class Task:
    """A regenerated task: its reference, the question, and the verifier's entry."""

    ref: TaskRef
    question: str
    answer: str  # ground truth as the dataset states it (for logs and SFT, never sent)
    entry: dict[str, Any]  # the full reasoning-gym item, needed by score_answer


class TaskError(ValueError):
    """A TaskRef this node cannot or will not regenerate; `reason` feeds the drop counter."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def regenerate(ref: TaskRef) -> Task:
    """Rebuild the exact question and ground truth named by `ref` (raises TaskError)."""
    if ref.dataset not in DATASET_NAMES:
        raise TaskError("unknown_dataset", f"unknown dataset {ref.dataset!r}")
    if not 0 <= ref.index < INDEX_SPACE:
        raise TaskError("bad_task", f"index {ref.index} out of range")
    try:
        entry = build_dataset(ref.dataset, ref.config, ref.seed)[ref.index]
    except Exception as exc:
        raise TaskError("bad_task", f"cannot regenerate {ref.dataset}: {exc}") from exc
    return Task(ref=ref, question=entry["question"], answer=str(entry["answer"]), entry=entry)


class TaskSource:
    """This node's deterministic task stream, its held-out set, and its allow-list for peers."""

    def __init__(self, cfg: TaskConfig):
        self.cfg = cfg
        accepted = cfg.accept_external if cfg.accept_external is not None else cfg.datasets
        self._allowed = {(s.name, config_key(s.config)) for s in accepted}
        self._weights = [s.weight for s in cfg.datasets]

    def sample(self, round_: int, n: int) -> list[Task]:
        """B tasks for `round_`: the dataset by weight, then the next unused index of that stream."""
        rng = random.Random(f"{self.cfg.seed}/{round_}")
        specs = rng.choices(self.cfg.datasets, weights=self._weights, k=n)
        # Index i of round r is r * n + i: distinct items across rounds of a fixed-size run.
        return [
            regenerate(TaskRef(s.name, dict(s.config), self.cfg.seed, round_ * n + i))
            for i, s in enumerate(specs)
        ]

    def eval_set(self) -> list[Task]:
        """Held-out items: the same mix from a disjoint seed, fixed for the whole run."""
        seed = self.cfg.eval_seed
        out = []
        for i in range(self.cfg.eval_size):
            spec = self.cfg.datasets[i % len(self.cfg.datasets)]
            out.append(regenerate(TaskRef(spec.name, dict(spec.config), seed, i)))
        return out

    def check_external(self, ref: TaskRef) -> Task:
        """Regenerate a peer's task if its dataset and config are on the allow-list."""
        if ref.dataset not in DATASET_NAMES:
            raise TaskError("unknown_dataset", f"unknown dataset {ref.dataset!r}")
        try:
            check_config(ref.config)  # before json.dumps sees it (a peer's config is hostile input)
        except ValueError as exc:
            raise TaskError("bad_task", str(exc)) from None
        if (ref.dataset, config_key(ref.config)) not in self._allowed:
            raise TaskError("task_not_allowed", f"{ref.dataset} with this config is not accepted")
        return regenerate(ref)

    def system_prompt(self) -> str | None:
        sp = self.cfg.system_prompt
        return SYSTEM_PROMPTS.get(sp, sp) if sp is not None else None

    def extract(self, completion: str) -> str | None:
        return extract(completion, self.cfg.extraction)

    def score(self, task: Task, completion: str) -> float:
        """Reward in [0, 1] from the dataset's own verifier; unparseable answer ⇒ 0."""
        return score(task, completion, self.cfg.extraction)


_OPEN, _CLOSE = "<answer>", "</answer>"


def extract_tagged(completion: str) -> str | None:
    """reasoning-gym's `extract_answer(completion)` (the last `<answer>\\s?(.*?)\\s?</answer>` match
    under re.DOTALL, stripped) computed in O(len(completion)) instead of by a backtracking regex.

    Matches are found left to right without overlap: from an opening tag, the lazy group ends at
    the first closing tag after it, minus one whitespace character (``\\s`` ≡ ``str.isspace``)
    directly before that tag; the optional whitespace after the opening tag is taken greedily.
    With no closing tag after an opening one there is no later match either, so the scan stops.
    """
    answer, pos = None, 0
    while (i := completion.find(_OPEN, pos)) >= 0:
        start = i + len(_OPEN)
        if start < len(completion) and completion[start].isspace():
            start += 1
        j = completion.find(_CLOSE, start)
        if j < 0:
            break
        end = j - 1 if j > start and completion[j - 1].isspace() else j
        answer, pos = completion[start:end], j + len(_CLOSE)
    return None if answer is None else answer.strip()


def max_answer_chars(task: Task) -> int:
    """The longest extracted answer handed to the dataset's verifier (longer ⇒ reward 0)."""
    return 1024 + 8 * len(task.answer)


def extract(completion: str, mode: str = "strict") -> str | None:
    answer = extract_tagged(completion)
    if answer is None and mode == "lenient":
        lines = [ln.strip() for ln in completion.strip().splitlines() if ln.strip()]
        answer = lines[-1] if lines else None
    return answer


def score(task: Task, completion: str, mode: str = "strict") -> float:
    answer = extract(completion, mode)
    if answer is None or len(answer) > max_answer_chars(task):
        return 0.0
    dataset = build_dataset(task.ref.dataset, task.ref.config, task.ref.seed)
    try:
        reward = float(dataset.score_answer(answer, task.entry))
    except Exception:  # a verifier choking on odd text is a wrong answer, not a crash
        return 0.0
    return min(max(reward, 0.0), 1.0)


def render_prompt(tokenizer, question: str, system_prompt: str | None) -> str:
    """The chat-templated prompt text (generation prompt appended)."""
    messages = [{"role": "user", "content": question}]
    if system_prompt:
        messages.insert(0, {"role": "system", "content": system_prompt})
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
