"""Federated mode's config (torch-free): algorithm, averaging period and bounds, PubSwap steps, client split.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class PubSwapConfig(BaseModel):
    """Public steps of PubSwap (used when algorithm = pubswap)."""

    model_config = ConfigDict(extra="forbid")
    rule: Literal["balanced", "random"] = Field("balanced", description="Response aggregation rule.")
    tau_swap: int = Field(2, ge=1, le=1_000_000, description="Every tau_swap-th round is a public step.")

class SplitConfig(BaseModel):
    """Dirichlet(α) split of the task families (tasks.datasets) across the clients."""

    model_config = ConfigDict(extra="forbid")
    alpha: float = Field(0.3, gt=0, le=1e4, description="Dirichlet concentration (0.1 = high heterogeneity).")
    clients: int = Field(4, ge=1, le=4096, description="Clients in the split (swarm local sets it to --nodes).")
    client: int = Field(0, ge=0, le=4095, description="This node's row of the split (swarm local sets it).")
    private_size: int = Field(256, ge=1, le=10_000_000, description="Private items per client (equal sizes).")
    public_size: int = Field(64, ge=1, le=10_000_000, description="Items in the shared public set.")
    seed: int = Field(0, ge=0, le=2**28 - 1, description="Shared by every client: the split, item streams and public draws.")

    @model_validator(mode="after")
    def _client_in_range(self) -> SplitConfig:
        if self.client >= self.clients:
            raise ValueError(f"client {self.client} is not below clients ({self.clients})")
        return self

class FederatedConfig(BaseModel):
    """Federated mode: LoRA averaging every tau rounds plus the chosen algorithm (docs/ARCHITECTURE.md §8)."""

    model_config = ConfigDict(extra="forbid")
    algorithm: Literal["fedavg", "fedprox", "pubswap"] = Field("fedavg", description="FedAvg-GRPO, FedProx or PubSwap.")
    tau: int = Field(10, ge=1, le=1_000_000, description="Local rounds between adapter averages.")
    weight_by_samples: bool = Field(False, description="Weight each peer's adapter by samples trained since the last average.")
    prox_mu: float = Field(0.01, ge=0, le=1e3, description="FedProx μ (used when algorithm = fedprox).")
    pubswap: PubSwapConfig = Field(default_factory=PubSwapConfig)
    split: SplitConfig = Field(default_factory=SplitConfig)
    public_wait_s: float = Field(30.0, ge=0, le=3600, description=(
        "Longest a public step waits for the other clients' responses to the same prompts."))
    average_timeout_s: float = Field(60.0, gt=0, le=3600, description="Longest wait for averaging partners (matchmaking).")
    matchmaking_time_s: float = Field(5.0, gt=0, le=600, description=(
        "How long the first peer at a boundary waits for the others (the group starts at once when all clients joined)."))
    allreduce_timeout_s: float = Field(60.0, gt=0, le=3600, description="Bound on the all-reduce itself.")
    min_group_size: int = Field(2, ge=2, le=4096, description="Fewest peers (us included) worth averaging with.")

    @model_validator(mode="after")
    def _timeouts(self) -> FederatedConfig:
        if self.average_timeout_s <= self.matchmaking_time_s:
            raise ValueError("average_timeout_s must exceed matchmaking_time_s")
        return self
