"""Which tasks a node trains on (torch-free): the dataset mix, stream seeds, prompts, extraction, held-out set.

reasoning-gym is imported only while a config is validated (checking dataset names and configs),
never at import time: it takes seconds to import.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

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
        from node.tasks.gym import (
            build_dataset,  # reasoning-gym, at validation time only
        )

        for spec in specs:
            try:
                build_dataset(spec.name, spec.config, 0)
            except Exception as exc:  # the dataset's own config validation
                raise ValueError(f"bad config for dataset {spec.name!r}: {exc}") from exc
        return specs
