"""Configs of the round's steps: train (optimizer and step shape), select (SAPO I/J), ingest (freshness).

Torch-free, so that validating a node's YAML imports neither torch nor the round's code.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from node.models.config import PlacementConfig


class TrainConfig(PlacementConfig):
    """Device and precision (PlacementConfig), optimizer and step shape; the loss has its own config."""

    model_config = ConfigDict(extra="forbid")
    lr: float = Field(1e-5, ge=0, le=1.0, description="AdamW learning rate (0 freezes the policy: a control run "
                      "on the same task stream).")
    weight_decay: float = Field(0.0, ge=0, le=1.0, description="AdamW weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.99), description="AdamW betas.")
    grad_clip: float = Field(1.0, gt=0, le=1e6, description="Global gradient-norm clip.")
    micro_batch_rows: int = Field(
        16, ge=1, le=65536, description="Most completions per forward/backward pass."
    )
    dash_threshold: float = Field(
        0.0, ge=0, le=10.0, description="DASH: drop rows with |A| below this (0 = keep all)."
    )
    advantage: Literal["std", "mean"] = Field(
        "std", description="Group normalisation: std (GRPO) or mean-only (Dr.GRPO, GEPO, DASH)."
    )
    epochs: int = Field(
        1, ge=1, le=64, description="PPO epochs over a round's rows (π_old fixed at the start of the round)."
    )
    mini_batches: int = Field(
        1, ge=1, le=4096, description="Optimizer steps per epoch, each on 1/k of the rows (whole groups)."
    )
    mask_truncated: bool = Field(
        False, description="Leave completions that hit max_new_tokens out of the loss (DAPO's overlong filtering)."
    )

class SelectConfig(BaseModel):
    """SAPO selection sizes."""

    model_config = ConfigDict(extra="forbid")
    local_groups: int = Field(4, ge=0, le=4096, description="I: own groups per training step.")
    external_groups: int = Field(
        4, ge=0, le=4096, description="J: peers' groups per training step (0 = solo)."
    )
    drop_zero_advantage: bool = Field(
        True, description="Skip groups whose completions all got the same reward."
    )
    backfill: bool = Field(
        True, description="When fewer than J peers' groups are available, train on more of our own (up to "
        "I + J in all): the step's batch stays the same size whether or not peers delivered."
    )
    pool_size: int = Field(
        512, ge=1, le=1_000_000, description="Most external groups kept waiting in the pool (oldest out first)."
    )


class IngestConfig(BaseModel):
    """Which peers' records are fresh and small enough to learn from: by age in swarm time (never by
    round), and within this node's own work bounds."""

    model_config = ConfigDict(extra="forbid")
    max_age_s: float = Field(
        600.0, gt=0, le=1e7, description="Drop records created longer ago than this (seconds); pooled "
        "peers' groups older than this are never selected."
    )
    max_clock_skew_s: float = Field(
        120.0, ge=0, le=1e5, description="Tolerated future timestamps from peers' clocks."
    )
    min_group_size: int = Field(2, ge=2, le=256, description="Fewer completions ⇒ no advantage.")
    max_completion_tokens: int | None = Field(
        None, ge=1, le=1 << 20,
        description="Drop a peer's record when a completion is longer than this many of the sender's "
        "tokens, or (another tokenizer) 4× this many in our re-tokenisation; null = this node's own "
        "generation.max_new_tokens.",
    )
