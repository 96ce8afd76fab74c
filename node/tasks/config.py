"""Which tasks a node trains on (torch-free): the dataset mix, stream seeds, prompts, extraction, held-out set.

A dataset of the mix is a reasoning-gym dataset (`name:`, DatasetSpec) or a file of the user's
own with a reward function by import path (`file:`, FileDatasetSpec; node.tasks.files).
reasoning-gym is imported only while a config is validated (checking dataset names and configs),
never at import time: it takes seconds to import. Files are only checked to exist here; they are
read (and hashed) when the node starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

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
        from node.tasks.gym import (
            dataset_names,  # at validation time only: importing it takes seconds
        )

        if name not in dataset_names():
            raise ValueError(f"unknown reasoning-gym dataset {name!r}")
        return name


class DatasetError(ValueError):
    """A dataset file that cannot be used (unreadable, wrong columns, a failing reward function)."""


class FileDatasetSpec(BaseModel):
    """A dataset file of your own (JSONL, Parquet, or a `datasets` save_to_disk folder) and its reward."""

    model_config = ConfigDict(extra="forbid")
    file: str = Field(description="Path of a .jsonl / .parquet file or a `datasets` folder (relative to the "
                      "working directory). Peers must hold a byte-identical copy: tasks are named by its sha256.")
    name: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,64}$",
                             description="Label in task references and logs (default: the file's stem).")
    reward: list[str] = Field(min_length=1, description=(
        "Reward function(s) by import path (`module:function` or `path/file.py:function`), TRL's "
        "signature `fn(prompts, completions, **columns) -> list[float]`; several are summed (README)."))
    reward_weights: list[float] | None = Field(None, description="Weight of each reward function (default all 1).")
    prompt_column: str = Field("prompt", description="Column holding the prompt: a string or a list of chat messages.")
    split: str | None = Field(None, description="Split of a `datasets` DatasetDict folder (needed if it has several).")
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$",
                               description="Expected content hash; the node refuses to start on another file.")
    holdout: int = Field(0, ge=0, le=1_000_000, description=(
        "Rows held out for evaluation (chosen by the content hash, the same on every node); never trained on, "
        "and peers' tasks on them are dropped (`held_out`)."))
    weight: float = Field(1.0, gt=0, le=1e6, description="Relative sampling weight in the mix.")

    @field_validator("reward", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @field_validator("reward")
    @classmethod
    def _import_paths(cls, paths: list[str]) -> list[str]:
        for p in paths:
            if p.count(":") < 1 or not p.rpartition(":")[2] or not p.rpartition(":")[0]:
                raise ValueError(f"reward {p!r}: expected module:function or path/to/file.py:function")
        return paths

    @model_validator(mode="after")
    def _checked(self) -> FileDatasetSpec:
        if not Path(self.file).expanduser().exists():
            raise ValueError(f"no such dataset file or folder: {self.file}")
        if self.reward_weights is not None and len(self.reward_weights) != len(self.reward):
            raise ValueError(f"reward_weights has {len(self.reward_weights)} entries for {len(self.reward)} reward functions")
        if self.name is None:
            stem = Path(self.file.rstrip("/")).name.split(".")[0] or "data"
            self.name = "".join(c if c.isalnum() or c in "_.-" else "_" for c in stem)[:64]
        return self


GYM_TAG, FILE_TAG = "reasoning_gym_spec", "file_spec"  # union tags: error paths leave them out (node.config)


def _dataset_kind(value: Any) -> str:
    if isinstance(value, dict):
        return FILE_TAG if "file" in value else GYM_TAG
    return FILE_TAG if isinstance(value, FileDatasetSpec) else GYM_TAG


DatasetEntry = Annotated[
    Union[Annotated[DatasetSpec, Tag(GYM_TAG)], Annotated[FileDatasetSpec, Tag(FILE_TAG)]], Discriminator(_dataset_kind)
]


class TaskConfig(BaseModel):
    """Which tasks a node trains on, how prompts are rendered and how answers are read."""

    model_config = ConfigDict(extra="forbid")
    datasets: list[DatasetEntry] = Field(min_length=1, description=(
        "The task mix: reasoning-gym datasets (`name:`) and dataset files of your own (`file:`)."))
    seed: int = Field(0, ge=0, le=2**29 - 1, description="This node's task stream: streams of different seeds "
                      "never share an item (node.tasks.streams).")
    system_prompt: str | None = Field(
        "default",
        description="A reasoning-gym SYSTEM_PROMPTS key, a literal prompt, or null for none.",
    )
    extraction: Literal["strict", "lenient", "number"] = Field(
        "strict", description="How the answer is read from a completion (module docstring)."
    )
    reward: Literal["partial", "exact"] = Field("partial", description=(
        "partial: the verifier's score in [0, 1] (reasoning-gym gives partial credit on some tasks, e.g. "
        "per letter); exact: 1 when that score is ≥ 1 (a fully correct answer), else 0 — a binary reward, "
        "under which a group whose completions all fail carries no signal and a peer's success can."))
    eval_size: int = Field(64, ge=0, le=10_000, description="Held-out evaluation items.")
    eval_seed: int = Field(EVAL_SEED, ge=0, le=2**29 - 1, description=(
        "Seed of the held-out set: the same on every node so accuracies compare. Its items come from a "
        "stream apart from every training stream, and training streams skip its questions."))
    eval_datasets: list[DatasetSpec] | None = Field(None, description=(
        "The held-out mix (reasoning-gym datasets), when it differs from the training mix: e.g. a node that "
        "trains on one difficulty band and is evaluated on all of them. null = the training mix (dataset files "
        "keep their own `holdout` rows)."))
    accept_external: list[DatasetEntry] | None = Field(
        None,
        description="Allow-list (dataset + exact config, or dataset file) for peers' tasks; null = this node's own "
        "mix and its held-out mix (eval_datasets).",
    )

    @field_validator("datasets", "eval_datasets")
    @classmethod
    def _configs_build(cls, specs: list[DatasetSpec | FileDatasetSpec] | None) -> list[DatasetSpec | FileDatasetSpec] | None:
        if specs is None:
            return specs
        if not specs:
            raise ValueError("needs at least one dataset")
        files = [s.name for s in specs if isinstance(s, FileDatasetSpec)]
        if len(set(files)) != len(files):
            raise ValueError(f"two dataset files share a name: {sorted(files)}; set `name:` on each")
        gym = [s for s in specs if isinstance(s, DatasetSpec)]
        if not gym:
            return specs
        from node.tasks.gym import (
            build_dataset,  # reasoning-gym, at validation time only
        )

        for spec in gym:
            try:
                build_dataset(spec.name, spec.config, 0)
            except Exception as exc:  # the dataset's own config validation
                raise ValueError(f"bad config for dataset {spec.name!r}: {exc}") from exc
        return specs
