"""Verifiable tasks: sampling, exact regeneration, prompts and rewards.

A task is named by a `TaskRef {dataset, config, seed, index}`. A mix may hold reasoning-gym
datasets and dataset files of the user's own (node.tasks.files: `dataset = "file:<name>"`, the
file's content hash in `config`, the row in `index`, rewards from functions by import path);
`TaskSource` serves both through the same methods. reasoning-gym datasets are
procedural and deterministic: item `index` of `create_dataset(dataset, seed=seed, **config)` is the
same question and ground truth on every machine, so a receiver regenerates every external task
itself and scores completions with its *own* verifier (docs/ARCHITECTURE.md §4). Claimed rewards are never used.

Answer extraction (documented in docs/CONFIG.md):
  - `strict`: the text inside the last `<answer>…</answer>` block, exactly as reasoning-gym's own
    `extract_answer` reads it, but in linear time (`extract_tagged`); no block ⇒ reward 0. This
    is what the system prompt asks for.
  - `lenient`: the tagged answer if present, else the last non-empty line of the completion.
    Useful to measure models that answer correctly but ignore the format.
  - `number`: the tagged answer if present, else the last number in the completion (`-?digits[.digits]`).
    For arithmetic with a small chat model that states its result in a sentence ("4 + 5 = 9"): under
    `lenient` SmolLM2-135M-Instruct solves almost no 1-digit sum exactly, under `number` about 0.1–0.17
    (examples/papers/sapo-smollm2.yaml).
The reward is the dataset's own `score_answer(answer, entry)` in [0, 1] (partial credit allowed);
with `tasks.reward: exact` it is 1 for a fully correct answer (score ≥ 1) and 0 otherwise.

Peers' text is hostile input, so verification is bounded before any dataset code runs:
reasoning-gym's regex `<answer>\\s?(.*?)\\s?</answer>` backtracks quadratically on an unclosed
`<answer>` repeated (measured: 32k characters 2.6 s, 128k 42 s); `extract_tagged` finds the same
block with `str.find` in one pass. An extracted answer longer than `max_answer_chars(task)` is a
wrong answer and never reaches the dataset's `score_answer`.
"""

from __future__ import annotations

import random
import re

from reasoning_gym.utils import SYSTEM_PROMPTS

from node.tasks.config import DatasetSpec, FileDatasetSpec, TaskConfig
from node.tasks.files import FileTasks, is_file_ref
from node.tasks.gym import (
    INDEX_SPACE,
    build_dataset,
    check_config,
    config_key,
    dataset_names,
)
from node.tasks.streams import Excluded, eval_seed, train_seed
from node.tasks.task import Task, TaskError
from protocols.records import TaskRef

DATASET_NAMES = frozenset(dataset_names())
__all__ = ["DATASET_NAMES", "PromptCache", "Task", "TaskError", "TaskSource", "extract", "regenerate", "render_prompt",
           "score", "task_label"]


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
    """This node's deterministic task stream, its held-out set, and its allow-list for peers.

    Streams never share items (node.tasks.streams): the training stream of `tasks.seed` and the
    held-out set of `tasks.eval_seed` live in disjoint seed blocks, and no training item asks a
    held-out question (replaced by a spare draw; a peer's such task is dropped as `held_out`).
    """

    def __init__(self, cfg: TaskConfig):
        self.cfg = cfg
        accepted = cfg.accept_external if cfg.accept_external is not None else cfg.datasets + (cfg.eval_datasets or [])
        self._allowed = {(s.name, config_key(s.config)) for s in accepted if isinstance(s, DatasetSpec)}
        self._weights = [s.weight for s in cfg.datasets]
        self.files = FileTasks([s for s in cfg.datasets if isinstance(s, FileDatasetSpec)],
                               [s for s in accepted if isinstance(s, FileDatasetSpec)])
        self._eval = self._build_eval_set()
        self.excluded = Excluded({t.question for t in self._eval if not is_file_ref(t.ref)})

    def sample(self, round_: int, n: int) -> list[Task]:
        """B tasks for `round_`: the dataset by weight, then the next unused position of that stream."""
        rng = random.Random(f"{self.cfg.seed}/{round_}")
        specs = rng.choices(self.cfg.datasets, weights=self._weights, k=n)
        # Position i of round r is r * n + i: distinct items across rounds of a fixed-size run.
        return [self._stream_item(s, self.cfg.seed, round_ * n + i) for i, s in enumerate(specs)]

    def _stream_item(self, spec: DatasetSpec | FileDatasetSpec, seed: int, position: int) -> Task:
        if isinstance(spec, FileDatasetSpec):  # a row of the file's training order (node.tasks.file_order)
            return self.files.train_task(spec.name, seed, position)
        base = train_seed(seed)
        return self.excluded.first_allowed(
            lambda index: regenerate(TaskRef(spec.name, dict(spec.config), base, index)), position)

    def eval_set(self) -> list[Task]:
        """Held-out items: the same mix from the held-out stream (files: their held-out rows), fixed for the run."""
        return list(self._eval)

    def eval_labels(self) -> list[str]:
        """The held-out items' task labels (task_label), in eval_set order: accuracies by task kind."""
        return [task_label(t.ref, self._label_names) for t in self._eval]

    def _build_eval_set(self) -> list[Task]:
        base = eval_seed(self.cfg.eval_seed)
        mix = self.cfg.eval_datasets or self.cfg.datasets
        self._label_names = {s.name for s in mix if isinstance(s, DatasetSpec)
                             if sum(isinstance(o, DatasetSpec) and o.name == s.name for o in mix) > 1}
        held_out = {s.name: iter(self.files.eval_tasks(s.name)) for s in mix if isinstance(s, FileDatasetSpec)}
        out = []
        for i in range(self.cfg.eval_size):
            spec = mix[i % len(mix)]
            if isinstance(spec, FileDatasetSpec):
                task = next(held_out[spec.name], None)  # a file holds `holdout` items, then none
                if task is not None:
                    out.append(task)
            else:
                out.append(regenerate(TaskRef(spec.name, dict(spec.config), base, i)))
        return out

    def check_external(self, ref: TaskRef) -> Task:
        """Regenerate a peer's task if its dataset and config (or its file's content) are on the allow-list."""
        try:
            check_config(ref.config)  # before json.dumps sees it (a peer's config is hostile input)
        except ValueError as exc:
            raise TaskError("bad_task", str(exc)) from None
        if is_file_ref(ref):
            return self.files.check_external(ref)
        if ref.dataset not in DATASET_NAMES:
            raise TaskError("unknown_dataset", f"unknown dataset {ref.dataset!r}")
        if (ref.dataset, config_key(ref.config)) not in self._allowed:
            raise TaskError("task_not_allowed", f"{ref.dataset} with this config is not accepted")
        task = regenerate(ref)
        if task.question in self.excluded:
            raise TaskError("held_out", "the question is in this node's held-out set")
        return task

    def system_prompt(self) -> str | None:
        sp = self.cfg.system_prompt
        return SYSTEM_PROMPTS.get(sp, sp) if sp is not None else None

    def extract(self, completion: str) -> str | None:
        return extract(completion, self.cfg.extraction)

    def score(self, task: Task, completion: str) -> float:
        """Reward of one completion (score_group)."""
        return self.score_group(task, [completion])[0]

    def score_group(self, task: Task, completions: list[str]) -> list[float]:
        """Rewards from this node's verifier: reasoning-gym's (in [0, 1], unparseable answer ⇒ 0) or,
        for a file task, the sum of this node's reward functions, called once for the group."""
        if is_file_ref(task.ref):
            rewards = self.files.score(task, completions)
        else:
            rewards = [score(task, c, self.cfg.extraction) for c in completions]
        if self.cfg.reward == "exact":
            return [1.0 if r >= 1.0 else 0.0 for r in rewards]
        return rewards


def task_label(ref: TaskRef, with_config: set[str] = frozenset()) -> str:
    """A short name for a task's kind: the dataset's name, plus its config (`name[k=v,…]`) when the
    name is in `with_config` (a mix holding one dataset under several configs, e.g. difficulty bands)."""
    if ref.dataset not in with_config or not isinstance(ref.config, dict):
        return ref.dataset
    return ref.dataset + "[" + ",".join(f"{k}={ref.config[k]}" for k in sorted(ref.config)) + "]"


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


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def extract(completion: str, mode: str = "strict") -> str | None:
    answer = extract_tagged(completion)
    if answer is None and mode == "lenient":
        lines = [ln.strip() for ln in completion.strip().splitlines() if ln.strip()]
        answer = lines[-1] if lines else None
    elif answer is None and mode == "number":
        numbers = _NUMBER.findall(completion)
        answer = numbers[-1] if numbers else None
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


def render_prompt(tokenizer, question: str, system_prompt: str | None, messages=None) -> str:
    """The chat-templated prompt text (generation prompt appended); `messages` (a file row's chat
    prompt) replace the single user message, the system prompt going first unless they hold one."""
    messages = [dict(m) for m in messages] if messages else [{"role": "user", "content": question}]
    if system_prompt and messages[0].get("role") != "system":
        messages.insert(0, {"role": "system", "content": system_prompt})
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


class PromptCache:
    """`prompt_of(task)`: render_prompt of a task in the node's chat template, cached by its TaskRef (4096 at most,
    then cleared)."""

    def __init__(self, tokenizer, system_prompt: str | None):
        self.tokenizer, self.system_prompt = tokenizer, system_prompt
        self._cache: dict = {}

    def __call__(self, task: Task) -> str:
        key = task.ref.dataset, task.ref.seed, task.ref.index, str(task.ref.config)
        if key not in self._cache:
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[key] = render_prompt(self.tokenizer, task.question, self.system_prompt, task.messages)
        return self._cache[key]
