"""The node's whole configuration: one pydantic model per concern, assembled here, read from YAML.

Every subsystem owns its config classes in its own torch-free `config` module (node.generation.config
→ GenerationConfig, losses.config → the LossConfig union, …); this module assembles them and holds
the two small ones of node-level modules (checkpoints, held-out evaluation). Importing it pulls in
neither torch nor reasoning-gym, so `swarm config show` and the CLI start fast. A bad file gets one
line naming the field: `config error in examples/x.yaml: train.lr: Input should be greater than 0`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from losses.config import GRPOConfig, LossConfig
from node.books.metrics import MetricsConfig
from node.distill.config import DistillConfig
from node.federated.config import FederatedConfig
from node.generation.config import GenerationConfig
from node.heterorl.config import HeteroRLConfig, Role, check_role
from node.models.config import ModelConfig
from node.round.config import IngestConfig, SelectConfig, TrainConfig
from node.tasks.config import FILE_TAG, GYM_TAG, FileDatasetSpec, TaskConfig
from swarm.config import SwarmConfig


class CheckpointConfig(BaseModel):
    """When and how many checkpoints are kept."""

    model_config = ConfigDict(extra="forbid")
    every: int = Field(1, ge=1, le=1_000_000, description="Checkpoint every this many rounds.")
    keep: int = Field(2, ge=1, le=1000, description="Newest checkpoints kept on disk.")
    resume: bool = Field(True, description="Resume from the newest checkpoint in --out.")


class EvalConfig(BaseModel):
    """Held-out accuracy: sampled completions of the held-out items (tasks.eval_size items)."""

    model_config = ConfigDict(extra="forbid")
    every: int = Field(5, ge=0, le=1_000_000, description="Evaluate every N rounds (0 = never).")
    at_start: bool = Field(True, description="Also evaluate before the first round.")
    samples: int = Field(1, ge=1, le=64, description="Completions sampled per held-out item: the accuracy is "
                         "their mean, its standard error is taken over items (more samples, smaller error).")


class NodeConfig(BaseModel):
    """One node. See docs/CONFIG.md for every field."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field("node", min_length=1, max_length=64, description="Label in logs and metrics.")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Seeds torch sampling and selection.")
    rounds: int = Field(20, ge=1, le=10_000_000, description="Rounds to run (--rounds overrides).")
    torch_threads: int | None = Field(None, ge=1, le=1024, description="torch intra-op threads.")
    model: ModelConfig
    tasks: TaskConfig
    generation: GenerationConfig = Field(default_factory=GenerationConfig)
    loss: LossConfig = Field(default_factory=GRPOConfig, description="The loss (by name).")
    train: TrainConfig = Field(default_factory=TrainConfig)
    select: SelectConfig = Field(default_factory=SelectConfig)
    ingest: IngestConfig = Field(default_factory=IngestConfig)
    swarm: SwarmConfig = Field(default_factory=SwarmConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    federated: FederatedConfig | None = Field(None, description="Federated mode (LoRA averaging); null = off.")
    role: Role = Field("full", description="full: sample, share and train; sampler: generate and publish with "
                       "a learner's weights, never train; learner: train on samplers' rollouts, publish weights "
                       "(HeteroRL, docs/ARCHITECTURE.md §12).")
    heterorl: HeteroRLConfig = Field(default_factory=HeteroRLConfig)
    distill: DistillConfig = Field(default_factory=DistillConfig, description="On-policy distillation: serve "
                                   "scores as a teacher, or ask named teachers as a student.")

    @model_validator(mode="after")
    def _federated_needs_lora(self) -> NodeConfig:
        if self.federated is not None and self.model.lora is None:
            raise ValueError("federated mode averages LoRA adapters: set model.lora")
        if self.federated is not None and any(isinstance(s, FileDatasetSpec) for s in self.tasks.datasets):
            raise ValueError("federated mode splits reasoning-gym task families: tasks.datasets cannot hold files")
        if self.federated is not None and self.train.autocast == "float16":
            raise ValueError("train.autocast float16 is not available in federated mode (its loss scale would "
                             "also divide the FedProx term); use bfloat16")
        check_role(self.role, self)
        if (self.distill.serve or self.distill.teachers) and not self.swarm.enabled:
            raise ValueError("distill.serve and distill.teachers need a swarm: set swarm.enabled")
        if self.distill.teachers and (self.role != "full" or self.federated is not None):
            raise ValueError("distill.teachers needs role full outside federated mode (the round that asks a "
                             "teacher is node.round.loop's)")
        return self


def strangers_note(cfg: NodeConfig) -> str | None:
    """A warning when the node trains on what peers send with no defence against taught text (None: it does not,
    or train.peer_token_floor is on). What a stranger can do then (docs/benchmarks/reliability.md §15C): one peer placing text
    of its choosing before correct answers raised it 36 nats over 100 rounds and cost 0.52 held-out on lab-spell.
    The floor is off by default because what it takes from honest peers depends on the model (3–7 % of lab-spell's
    above-mean tokens at 0.01, 62 % of SmolLM2-135M's at temperature 1: bench/learning/plausibility.py)."""
    takes = cfg.swarm.enabled and cfg.role != "sampler" and (
        cfg.select.external_groups > 0 or cfg.select.external_tokens > 0 or bool(cfg.distill.teachers))
    if not takes or cfg.train.peer_token_floor > 0:
        return None
    return ("trains on peers' rows with no defence against taught text (train.peer_token_floor 0): any peer can "
            "teach this node text of its choosing (docs/benchmarks/reliability.md §15C); among strangers set "
            "train.peer_token_floor (e.g. 0.01), or train only with peers you trust")


def precision_note(cfg: NodeConfig) -> str | None:
    """A warning when full fine-tuning stores bfloat16 weights at a learning rate whose AdamW updates mostly round
    away (None otherwise). AdamW moves a weight by about `lr` a step; a bfloat16 weight w changes only when that
    exceeds half its rounding step, |w|·2⁻⁹: at lr 1e-5 no weight above ≈ 0.005 in magnitude moves, at 1e-6 none
    above ≈ 0.0005 — most of a model's (tests/unit/node/test_device.py measures it). LoRA keeps its adapter in float32."""
    if cfg.model.dtype != "bfloat16" or cfg.model.lora is not None or cfg.train.lr > 1e-5 or cfg.train.lr == 0:
        return None
    return (f"full fine-tuning of bfloat16 weights at train.lr {cfg.train.lr:g}: most AdamW updates are smaller "
            "than a bfloat16 rounding step and are lost; use model.dtype: float32 with train.autocast: bfloat16 "
            "(float32 master weights), or LoRA")


class ConfigError(ValueError):
    """A config problem, already phrased as the one line the user sees."""


def _set_path(data: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    for k in keys[:-1]:
        data = data.setdefault(k, {})
        if not isinstance(data, dict):
            raise ConfigError(f"cannot set {dotted}: {k} is not a mapping")
    data[keys[-1]] = value


def parse_config(data: dict[str, Any], source: str = "config") -> NodeConfig:
    try:
        return NodeConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"] if p not in (GYM_TAG, FILE_TAG)) or "(top level)"
        more = f" (+{len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        msg = err["msg"].removeprefix("Value error, ")
        raise ConfigError(f"config error in {source}: {where}: {msg}{more}") from None


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> NodeConfig:
    """Read YAML, apply dotted-key overrides (e.g. {"swarm.initial_peers": [...]}) and validate."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"config error in {path}: not valid YAML: {exc}".splitlines()[0]) from None
    if not isinstance(data, dict):
        raise ConfigError(f"config error in {path}: the top level must be a mapping")
    for key, value in (overrides or {}).items():
        _set_path(data, key, value)
    return parse_config(data, str(path))
