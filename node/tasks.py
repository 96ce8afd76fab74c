"""Verifiable tasks from reasoning-gym: sampling, exact regeneration, prompts and rewards.

A task is named by a `TaskRef {dataset, config, seed, index}`. reasoning-gym datasets are
procedural and deterministic: item `index` of `create_dataset(dataset, seed=seed, **config)` is the
same question and ground truth on every machine, so a receiver regenerates every external task
itself and scores completions with its *own* verifier (DESIGN §5). Claimed rewards are never used.

Answer extraction (documented in docs/CONFIG.md):
  - `strict`: the text inside the last `<answer>…</answer>` block (reasoning-gym's own
    `extract_answer`); no block ⇒ reward 0. This is what the system prompt asks for.
  - `lenient`: the tagged answer if present, else the last non-empty line of the completion.
    Useful to measure models that answer correctly but ignore the format.
The reward is the dataset's own `score_answer(answer, entry)` in [0, 1] (partial credit allowed).
"""

from __future__ import annotations

import functools
import json
import random
from dataclasses import dataclass
from typing import Any, Literal

import reasoning_gym
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from reasoning_gym.utils import SYSTEM_PROMPTS, extract_answer

from protocols.records import TaskRef

# Procedural datasets generate items lazily; `size` only bounds the index space.
_INDEX_SPACE = 1_000_000_000
# Seed offset for the held-out evaluation stream: disjoint from any training seed a config uses.
EVAL_SEED = 1_000_003


class DatasetSpec(BaseModel):
    """One reasoning-gym dataset in the node's task mix."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="reasoning-gym dataset name, e.g. 'chain_sum'.")
    weight: float = Field(1.0, gt=0, le=1e6, description="Relative sampling weight in the mix.")
    config: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments of the dataset's config class."
    )

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in reasoning_gym.factory.DATASETS:
            raise ValueError(f"unknown reasoning-gym dataset {name!r}")
        return name


class TaskConfig(BaseModel):
    """Which tasks a node trains on, how prompts are rendered and how answers are read."""

    model_config = ConfigDict(extra="forbid")
    datasets: list[DatasetSpec] = Field(min_length=1, description="The task mix.")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Seed of this node's task stream.")
    system_prompt: str | None = Field(
        "default",
        description="A reasoning-gym SYSTEM_PROMPTS key, a literal prompt, or null for none.",
    )
    extraction: Literal["strict", "lenient"] = Field(
        "strict", description="How the answer is read from a completion (module docstring)."
    )
    eval_size: int = Field(64, ge=0, le=10_000, description="Held-out evaluation items.")
    eval_seed: int = Field(EVAL_SEED, ge=0, le=2**31 - 1, description=(
        "Seed of the held-out set: the same on every node so accuracies compare; keep it apart from task seeds."))
    accept_external: list[DatasetSpec] | None = Field(
        None,
        description="Allow-list (dataset + exact config) for peers' tasks; null = this node's own mix.",
    )

    @model_validator(mode="after")
    def _eval_apart(self) -> TaskConfig:
        if self.eval_seed == self.seed:
            raise ValueError(f"eval_seed equals seed ({self.seed}): the held-out set would be the training stream")
        return self

    @field_validator("datasets")
    @classmethod
    def _configs_build(cls, specs: list[DatasetSpec]) -> list[DatasetSpec]:
        for spec in specs:
            try:
                _dataset(spec.name, _config_key(spec.config), 0)
            except Exception as exc:  # the dataset's own config validation
                raise ValueError(f"bad config for dataset {spec.name!r}: {exc}") from exc
        return specs


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


def _config_key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


@functools.lru_cache(maxsize=256)
def _dataset(name: str, config_key: str, seed: int):
    return reasoning_gym.create_dataset(name, seed=seed, size=_INDEX_SPACE, **json.loads(config_key))


def regenerate(ref: TaskRef) -> Task:
    """Rebuild the exact question and ground truth named by `ref` (raises TaskError)."""
    if ref.dataset not in reasoning_gym.factory.DATASETS:
        raise TaskError("unknown_dataset", f"unknown dataset {ref.dataset!r}")
    if not 0 <= ref.index < _INDEX_SPACE:
        raise TaskError("bad_task", f"index {ref.index} out of range")
    try:
        entry = _dataset(ref.dataset, _config_key(ref.config), ref.seed)[ref.index]
    except Exception as exc:
        raise TaskError("bad_task", f"cannot regenerate {ref.dataset}: {exc}") from exc
    return Task(ref=ref, question=entry["question"], answer=str(entry["answer"]), entry=entry)


class TaskSource:
    """This node's deterministic task stream, its held-out set, and its allow-list for peers."""

    def __init__(self, cfg: TaskConfig):
        self.cfg = cfg
        accepted = cfg.accept_external if cfg.accept_external is not None else cfg.datasets
        self._allowed = {(s.name, _config_key(s.config)) for s in accepted}
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
        if ref.dataset not in reasoning_gym.factory.DATASETS:
            raise TaskError("unknown_dataset", f"unknown dataset {ref.dataset!r}")
        if (ref.dataset, _config_key(ref.config)) not in self._allowed:
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


def extract(completion: str, mode: str = "strict") -> str | None:
    answer = extract_answer(completion)
    if answer is None and mode == "lenient":
        lines = [ln.strip() for ln in completion.strip().splitlines() if ln.strip()]
        answer = lines[-1] if lines else None
    return answer


def score(task: Task, completion: str, mode: str = "strict") -> float:
    answer = extract(completion, mode)
    if answer is None:
        return 0.0
    dataset = _dataset(task.ref.dataset, _config_key(task.ref.config), task.ref.seed)
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
