"""Configs of the round's steps: train (optimizer and step shape), select (SAPO I/J), ingest (freshness,
the staleness bound in the learner's steps and the delay simulator of HeteroRL experiments).

Torch-free, so that validating a node's YAML imports neither torch nor the round's code.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from node.models.config import PlacementConfig


class TrainConfig(PlacementConfig):
    """Device and precision (PlacementConfig), optimizer and step shape; the loss has its own config."""

    model_config = ConfigDict(extra="forbid")
    lr: float = Field(1e-5, ge=0, le=1.0, description="AdamW learning rate (0 freezes the policy: a control run "
                      "on the same task stream).")
    weight_decay: float = Field(0.0, ge=0, le=1.0, description="AdamW weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.99), description="AdamW betas.")
    grad_clip: float = Field(1.0, gt=0, le=1e6, description="Global gradient-norm clip.")
    micro_batch_rows: int | Literal["auto"] = Field(
        16, description="Most completions per forward/backward pass (1–65536). auto: the most rows of the longest "
        "length a step can hold that fit the training device's free memory, measured once at start and printed "
        "(node/round/sizing.py)."
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
    cross_tokenizer: Literal["chunks", "chunks-geometric", "sequence"] = Field(
        "chunks", description="A peer's row from another tokenizer: compare log-probs over the pieces of text both "
        "tokenizations end at (chunks, when the sender sent token_bytes: each token of a chunk carries the chunk's "
        "ratio r_c; chunks-geometric: r_c^(1/n_c), lower variance but biased towards 1) or over the whole "
        "completion (sequence). docs/ARCHITECTURE.md §6.")
    imitate: float = Field(
        0.0, ge=0, le=100.0, description="lam: add −lam·(1/N)·Σ mean_t log π over the rows whose advantage is positive "
        "(answers that scored above their group by this node's verifier; of peers only, or all with imitate_rows) to "
        "the loss: imitation of peers' better answers, which taught a lab student where importance-weighted rows "
        "alone did not, though not by the peer's strength (an untrained copy sending as many groups helped as much; "
        "losses/imitation.py, docs/benchmarks/learning.md §12D; this project's own method). 0 = off.")
    imitate_rows: Literal["peers", "all"] = Field(
        "peers", description="Which above-mean rows `imitate` pushes up: peers' only, or ours too (all: the "
        "control that tells a peer's answers from the extra push on successes itself).")
    imitate_bar: Literal["group", "own"] = Field(
        "own", description="What an answer must beat to be imitated: its group's mean (group), or that and the mean "
        "reward of this node's own rows in the step (own: a weaker peer's best answers, still worse than what this "
        "node writes, are not imitated; under a binary reward the two choose the same rows unless every own row "
        "of the step is correct). A step with no own rows (every own group dropped for equal rewards, or none "
        "selected) has no own bar: the group's mean alone decides. docs/benchmarks/learning.md §12D.")
    peer_token_floor: float = Field(
        0.0, ge=0, lt=1.0, description="p: a peer's token whose probability under this node's own policy (at the "
        "start of the step, at the sampling temperature) is below p gets no gradient, nor (peer_floor_span: rest) "
        "does any later token of its row, in the loss and in the imitation term; our own rows are untouched. Stops "
        "a peer teaching text of its choosing placed before a correct answer (docs/benchmarks/reliability.md §15C: 0.01 on "
        "lab-spell); what it takes from honest peers depends on the model (bench/learning/plausibility.py: 3–7 % of "
        "lab-spell's above-mean tokens at 0.01, 62 % of SmolLM2-135M's at T 1). losses/peer_floor.py; this "
        "project's own departure from F-TIS and SAPO. 0 = off, the default: with 0.01, honest sharing's gain in the "
        "binary regime moved −0.005 ± 0.008, missing the rule fixed before the runs (lower end ≥ −0.01).")
    peer_floor_span: Literal["rest", "token"] = Field(
        "rest", description="What peer_token_floor takes from a peer's row: rest = the first token below the floor "
        "and every token after it (text that follows what this node would not write trains nothing, not even as "
        "context); token = only the tokens below the floor (measured: not enough, docs/benchmarks/reliability.md §15C).")

    @field_validator("micro_batch_rows")
    @classmethod
    def _rows(cls, v: int | str) -> int | str:
        if v != "auto" and not 1 <= v <= 65536:
            raise ValueError(f"micro_batch_rows must be auto or 1–65536, not {v}")
        return v


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
    pool_backfill: bool = Field(
        False, description="When fewer than I of our own groups are informative, train on more peers' groups "
        "(up to I + J in all): the step keeps its size when our own groups carry no signal (docs/ARCHITECTURE.md §5)."
    )
    prefer: Literal["uniform", "need", "useful"] = Field(
        "uniform", description="Which pooled groups to take: uniform (SAPO: at random); need — first those "
        "on the task kinds (dataset and config) where our own recent rewards are lowest, e.g. the hard band; "
        "useful — first those on kinds where our own latest group solved nothing, then by reward variance "
        "(highest first), then newest first (docs/ARCHITECTURE.md §5)."
    )
    external_tokens: int = Field(
        0, ge=0, le=10_000_000, description="A per-step budget of peers' completion tokens in place of J: "
        "pooled groups (informative ones, in `prefer` order) are taken until their completion tokens reach it "
        "(the last one may cross it). 0 = off: J groups (docs/ARCHITECTURE.md §5)."
    )
    replay_tokens: int = Field(
        0, ge=0, le=10_000_000, description="Fill each step with our own earlier informative groups until its "
        "completion tokens (own, peers' and replayed) reach this many: a node alone training as many tokens as a "
        "swarm node, on its own data (the solo control of docs/benchmarks/learning.md §13I; fewest replays first, newest "
        "among equals; each replayed row is weighed against the policy that sampled it, μ). 0 = off."
    )
    replay_pool: int = Field(
        64, ge=1, le=100_000, description="Most of our own informative groups kept for replay (oldest out first)."
    )
    replay_repeat: int = Field(
        1, ge=1, le=64, description="Most times one of our own groups is replayed within one step (replay_tokens); "
        "above 1 a group taken twice weighs twice in that step."
    )


class DelayConfig(BaseModel):
    """Simulated network delay (node.round.delay): a learner holds each incoming record this long before use.

    lognormal (the gepo paper's §4.1 delay model, its authors' Time_Delay): T ~ LogNormal(mu_ln, sigma_ln),
    delay = clip(T − offset_s, min_s, max_s) · time_scale; the defaults solve mu_ln ∓ 2.807·sigma_ln =
    ln 60, ln 1920 (60–1920 s at 99.5 %). fixed: delay = fixed_s · time_scale. Seeded: the same seed draws the
    same delays in the order records arrive.
    """

    model_config = ConfigDict(extra="forbid")
    kind: Literal["none", "lognormal", "fixed"] = Field("none", description="none = no simulated delay.")
    mu_ln: float = Field(5.827, ge=-20, le=20, description="lognormal: mean of log T (T in seconds).")
    sigma_ln: float = Field(0.617, ge=0, le=10, description="lognormal: standard deviation of log T.")
    offset_s: float = Field(60.0, ge=0, le=1e6, description="lognormal: subtracted from T before clipping.")
    min_s: float = Field(60.0, ge=0, le=1e6, description="lognormal: shortest delay before time_scale.")
    max_s: float = Field(1920.0, ge=0, le=1e6, description="lognormal: longest delay before time_scale.")
    fixed_s: float = Field(0.0, ge=0, le=1e6, description="fixed: the delay before time_scale.")
    time_scale: float = Field(1.0, gt=0, le=1e3, description="Multiplies every delay (0.01 turns 60–1920 s into "
                              "0.6–19.2 s for a run on one machine).")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Seeds the draws.")
    max_held: int = Field(4096, ge=1, le=1_000_000, description="Records held at once; more are dropped "
                          "(delay_overflow).")

    @model_validator(mode="after")
    def _range(self) -> DelayConfig:
        if self.min_s > self.max_s:
            raise ValueError(f"min_s ({self.min_s:g}) exceeds max_s ({self.max_s:g})")
        return self

    @property
    def longest_s(self) -> float:
        """The longest delay this model can draw, in seconds after time_scale."""
        return {"none": 0.0, "lognormal": self.max_s, "fixed": self.fixed_s}[self.kind] * self.time_scale


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
    max_delay_steps: int | None = Field(
        None, ge=0, le=1_000_000, description="Learner (role learner) only: use a record only while its "
        "learner version − policy_version ≤ this many optimizer steps, else drop it (stale_version); None = "
        "no bound. The gepo paper sweeps 0, 4, 8, 16, 32, 64."
    )
    delay: DelayConfig = Field(default_factory=DelayConfig, description="Learner only: simulated network delay "
                               "of incoming records (node.round.delay).")

    @model_validator(mode="after")
    def _delay_within_age(self) -> IngestConfig:
        if self.delay.longest_s >= self.max_age_s:
            raise ValueError(f"delay: the longest simulated delay ({self.delay.longest_s:g} s) must stay below "
                             f"max_age_s ({self.max_age_s:g} s), or every delayed record ages out")
        return self
