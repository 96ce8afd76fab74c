"""Wire records: what one node tells the swarm about one prompt group (DESIGN §4, docs/PROTOCOL.md).

Plain frozen dataclasses with no behaviour beyond construction, so they can cross any boundary.
Encoding, decoding and every validation of untrusted input live in ``protocols.codec``.

Two families of numbers never mix: ``Completion.logprobs`` are the *sender's* sampling
log-probabilities log μ(y_t | x, y_<t) of the temperature-scaled distribution it sampled from
(DESIGN §7); a receiver's own scores π_θ / π_old are computed locally and never put on the wire.
``Completion.reward_claimed`` is informational only: receivers recompute rewards (DESIGN §5).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1
FINISH_REASONS = ("stop", "length")  # EOS sampled | max_new_tokens reached


@dataclass(frozen=True)
class TaskRef:
    """A reasoning-gym item named by (dataset, config, seed, index); any node regenerates it exactly."""

    dataset: str
    config: dict[str, Any]
    seed: int
    index: int


@dataclass(frozen=True)
class ModelInfo:
    """The sender's policy: a display name, its tokenizer fingerprint (sha256 hex) and vocab size."""

    name: str
    tokenizer: str
    vocab_size: int


@dataclass(frozen=True)
class SamplingInfo:
    """How the completions were sampled; logprobs are of logits / temperature (after top-p)."""

    temperature: float
    top_p: float
    max_new_tokens: int


@dataclass(frozen=True)
class Completion:
    """One sampled completion: decoded text, token ids and per-token sampling logprobs (same length)."""

    text: str
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: str
    reward_claimed: float | None = None


@dataclass(frozen=True)
class RolloutRecord:
    """One prompt group (G completions of one task) as published by one peer in one round."""

    swarm: str
    peer: str
    round: int
    policy_version: int
    created_at: float
    model: ModelInfo
    sampling: SamplingInfo
    task: TaskRef
    prompt: str
    completions: tuple[Completion, ...]
    v: int = SCHEMA_VERSION


@dataclass(frozen=True)
class Announcement:
    """The small DHT value announcing one peer's bundle for one round (the bytes move over P2P)."""

    peer: str
    round: int
    count: int
    nbytes: int
    sha256: str
    policy_version: int
    created_at: float
    v: int = field(default=SCHEMA_VERSION)
