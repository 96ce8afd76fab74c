"""Wire records: what one node tells the swarm about one prompt group (docs/PROTOCOL.md).

Plain frozen dataclasses with no behaviour beyond construction, so they can cross any boundary.
Encoding, decoding and every validation of untrusted input live in ``protocols.codec``.

Two families of numbers never mix: ``Completion.logprobs`` are the *sender's* sampling
log-probabilities log μ(y_t | x, y_<t) of the temperature-scaled distribution it sampled from
(docs/ARCHITECTURE.md §6); a receiver's own scores π_θ / π_old are computed locally and never put on the wire.
``Completion.reward_claimed`` is informational only: receivers recompute rewards (docs/ARCHITECTURE.md §4).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 2  # v2: exchange by swarm time (announcements keyed by window, not round)
FINISH_REASONS = ("stop", "length")  # EOS sampled | max_new_tokens reached


@dataclass(frozen=True)
class TaskRef:
    """A reasoning-gym item named by (dataset, config, seed, index); any node regenerates it exactly."""

    dataset: str  # reasoning-gym dataset name; receivers drop names they do not allow
    config: dict[str, Any]  # the dataset's config kwargs (JSON-like, string keys); part of the identity
    seed: int  # dataset seed: (dataset, config, seed) fixes the whole item stream
    index: int  # item index in that stream (≥ 0): the receiver regenerates question and answer


@dataclass(frozen=True)
class ModelInfo:
    """The sender's policy: a display name, its tokenizer fingerprint (sha256 hex) and vocab size."""

    name: str  # display only (model spec); never used to decide anything
    tokenizer: str  # sha256 hex of the canonical tokenizer JSON: equal ⇒ token ids and μ_t are usable
    vocab_size: int  # bounds every token id; ≤ 65536 ⇒ ids packed as uint16, else uint32


@dataclass(frozen=True)
class SamplingInfo:
    """How the completions were sampled; logprobs are of logits / temperature (after top-p)."""

    temperature: float  # > 0; the logprobs are of logits / temperature
    top_p: float  # (0, 1]; the nucleus is not renormalised into the logprobs
    max_new_tokens: int  # > 0; explains finish_reason "length"


@dataclass(frozen=True)
class Completion:
    """One sampled completion: decoded text, token ids and per-token sampling logprobs (same length)."""

    text: str  # decoded completion: what a receiver with another tokenizer re-tokenises
    token_ids: tuple[int, ...]  # [L] sampled ids in the sender's tokenizer, EOS included if sampled
    logprobs: tuple[float, ...]  # [L] log μ(y_t | x, y_<t) ≤ 0, the behaviour policy of off-policy losses
    finish_reason: str  # "stop" (EOS sampled) or "length" (max_new_tokens reached)
    reward_claimed: float | None = None  # the sender's reward, informational only (never trusted)
    # [L] UTF-8 bytes of `text` each token produced (Σ = len(text.encode())), or None: lets a receiver
    # with another tokenizer align the two tokenizations (node/round/align.py, docs/ARCHITECTURE.md §6)
    token_bytes: tuple[int, ...] | None = None


@dataclass(frozen=True)
class RolloutRecord:
    """One prompt group (G completions of one task) as published by one peer in one round."""

    swarm: str  # swarm id: records of another swarm are ignored
    peer: str  # sender peer id (the transport checks it against the signed subkey)
    round: int  # sender's own round counter (≥ 0): informational (logs); federated public steps: the step index
    policy_version: int  # sender's optimizer steps so far (≥ 0): staleness in async mode
    created_at: float  # sender's wall clock (unix s): age-based staleness, delay experiments
    model: ModelInfo  # which tokenizer the ids are in, and the id bound
    sampling: SamplingInfo  # how μ was produced
    task: TaskRef  # what the receiver regenerates and verifies itself
    prompt: str  # the sender's rendered prompt; receivers check it against their own rendering
    completions: tuple[Completion, ...]  # the G completions of one GRPO group
    v: int = SCHEMA_VERSION  # schema version; a receiver drops versions it does not speak


@dataclass(frozen=True)
class Announcement:
    """The small value announcing one bundle of one peer (the bytes move over a libp2p stream).

    Stored in the DHT under the key of the time window it was published in (protocols.keys), and
    pushed directly to recently seen peers; both carry exactly these fields (`addrs` only when not empty).
    """

    peer: str  # publisher peer id (whom to fetch the bundle from)
    window: int  # swarm-time window of publishing: ⌊created_at / window_s⌋, equal to the key's window
    count: int  # records in the bundle (≥ 0): checked against the records delivered
    nbytes: int  # compressed bundle size (> 0): checked against the caps before fetching
    sha256: str  # hex digest of the bundle bytes: checked after fetching; names the bundle when fetching
    policy_version: int  # publisher's policy version, for staleness before any download
    created_at: float  # publisher's clock (unix s) when it published: age before any download
    v: int = field(default=SCHEMA_VERSION)  # schema version
    addrs: str = ""  # optional dial hint: the publisher's TCP multiaddrs, space-separated (protocols.addrs)
    level: int = -1  # optional: the announcement-shard level its publisher gossips at (protocols.keys); -1: absent
