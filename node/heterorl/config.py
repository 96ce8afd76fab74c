"""HeteroRL's config (torch-free): the sampler and learner roles and the weight broadcast between them.

`role` (a top-level field of the node's config) picks the round function; this section configures the
two roles other than `full` (docs/ARCHITECTURE.md §12). The learner's staleness bound and the delay
simulator are `ingest.max_delay_steps` and `ingest.delay`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Role = Literal["full", "sampler", "learner"]
_PEER_ID = r"^[1-9A-HJ-NP-Za-km-z]{30,100}$"  # base58 libp2p peer id


class HeteroRLConfig(BaseModel):
    """Sampler and learner roles: who follows whom, how long a learner waits, how weights travel."""

    model_config = ConfigDict(extra="forbid")
    follow: list[str] = Field(default_factory=list, max_length=16, description="Sampler: the learner peer ids "
                              "whose weights it loads (the learner prints its id at start; `swarm local "
                              "--samplers` fills it in). Weights of any other peer are never loaded.")
    accept_from: list[str] = Field(default_factory=list, max_length=4096, description="Learner: the sampler "
                                   "peer ids whose records it trains on; empty = any peer (every record is "
                                   "re-verified either way). Record versions are only comparable to ours when "
                                   "the sender samples with our weights.")
    generate_own: bool = Field(False, description="Learner: also generate and train on its own groups "
                               "(select.local_groups of them per step, never published).")
    wait_s: float = Field(30.0, ge=0, le=3600, description="Learner: longest a round waits for "
                          "select.external_groups usable groups from samplers before it trains on what it has.")
    publish_every: int = Field(1, ge=1, le=1_000_000, description="Learner: announce new weights every this "
                               "many optimizer steps (and once at start).")
    keep_versions: int = Field(2, ge=1, le=64, description="Learner: newest weight versions served at once "
                               "(a sampler still fetching the previous one can finish).")
    poll_interval_s: float = Field(1.0, ge=0.05, le=600, description="Sampler: how often the followed "
                                   "learners' announcements are read.")
    max_weight_bytes: int = Field(2 << 30, ge=1 << 10, le=1 << 40, description="Sampler: largest weight file "
                                  "fetched (checked against the announcement before any byte is read).")
    fetch_timeout_s: float = Field(300.0, gt=0, le=86400, description="Sampler: bound on fetching one "
                                   "version's weights.")
    announce_ttl_s: float = Field(3600.0, ge=10, le=86400 * 7, description="Learner: DHT expiration of its "
                                  "weight announcement (stored again every third of it).")

    @field_validator("follow", "accept_from")
    @classmethod
    def _peer_ids(cls, v: list[str]) -> list[str]:
        import re

        for p in v:
            if not re.fullmatch(_PEER_ID, p):
                raise ValueError(f"{p!r} is not a base58 peer id (copy the id the learner printed)")
        return v


def check_role(role: Role, cfg) -> None:
    """Cross-section rules of a node config with this role (NodeConfig validator); ValueError names the field."""
    if role != "full" and cfg.federated is not None:
        raise ValueError(f"role {role} cannot run federated mode (set federated: null)")
    if role == "full":  # a sampler ignores them, so one config can serve a learner and its samplers
        if cfg.ingest.max_delay_steps is not None:
            raise ValueError("ingest.max_delay_steps applies to role learner only (set role)")
        if cfg.ingest.delay.kind != "none":
            raise ValueError("ingest.delay applies to role learner only (set role)")
    if role == "learner" and cfg.swarm.client_mode:  # samplers open streams to it to fetch its weights
        raise ValueError("role learner serves its weights to samplers over a stream: it cannot run in "
                         "swarm.client_mode (samplers can)")
    if role == "sampler" and "max_fetches_per_window" not in cfg.swarm.model_fields_set:
        cfg.swarm.max_fetches_per_window = 0  # a sampler never trains: it fetches no peer's rollouts
