"""A learner's weight announcement: what it tells its samplers about its newest weights (docs/PROTOCOL.md §10).

The learner of a HeteroRL swarm stores one small signed value under its own DHT key

    key   = "{swarm}/weights/{learner peer id}"
    value = msgpack {"v": 2, "peer", "version", "sha256", "nbytes", "format", "created_at"}   (≤ 1 KiB)

and serves the bytes it names (a safetensors file: the full state dict, or a LoRA adapter's) over
a libp2p stream (`/rlswarm/weights/2`, the bundle stream's framing). Pure data and its codec;
the receive rules live in swarm.weights.channel.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import msgpack

from protocols.announce import unpack_small_map
from protocols.codec import RecordError
from protocols.records import SCHEMA_VERSION

FORMATS = ("full", "lora")  # safetensors of the whole state dict | of a peft adapter's tensors
MAX_WEIGHT_ANNOUNCEMENT = 1024
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class WeightAnnouncement:
    peer: str  # the learner's peer id; must equal the signer of the DHT subkey and the key's peer id
    version: int  # the learner's optimizer steps when it published (≥ 0); records sampled with it carry it
    sha256: str  # hex digest of the weight bytes: names them in a fetch, checked after it
    nbytes: int  # exact size of the weight bytes (> 0), checked against the receiver's cap before fetching
    format: str  # "full" or "lora"
    created_at: float  # the learner's clock (unix s) when it published; the newest announcement wins
    v: int = SCHEMA_VERSION


def weights_key(swarm: str, learner: str) -> str:
    """The DHT key a learner announces its newest weights under."""
    return f"{swarm}/weights/{learner}"


def encode_weight_announcement(a: WeightAnnouncement) -> bytes:
    return msgpack.packb(asdict(a), use_bin_type=True)


def decode_weight_announcement(data: Any) -> WeightAnnouncement:
    """Validate a weight announcement (msgpack map ≤ 1 KiB) or raise RecordError(bad_announcement | version)."""
    d = unpack_small_map(data, MAX_WEIGHT_ANNOUNCEMENT)
    if not isinstance(d, dict):
        raise RecordError("bad_announcement", "not a map")
    if type(d.get("v")) is int and d["v"] != SCHEMA_VERSION:
        raise RecordError("version", f"weight announcement v{d['v']}, this node speaks v{SCHEMA_VERSION}")
    kinds = {"peer": str, "version": int, "sha256": str, "nbytes": int, "format": str, "created_at": (float, int),
             "v": int}
    for key, kind in kinds.items():
        value = d.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise RecordError("bad_announcement", f"field {key!r} missing or of the wrong type")
    a = WeightAnnouncement(peer=d["peer"], version=d["version"], sha256=d["sha256"], nbytes=d["nbytes"],
                           format=d["format"], created_at=float(d["created_at"]), v=d["v"])
    if a.version < 0 or a.nbytes <= 0 or not math.isfinite(a.created_at):
        raise RecordError("bad_announcement", "version, size or time out of range")
    if len(a.sha256) != 64 or not set(a.sha256) <= _HEX:
        raise RecordError("bad_announcement", "sha256 is not a lowercase hex digest")
    if a.format not in FORMATS:
        raise RecordError("bad_announcement", f"format {a.format[:32]!r} is not one of {', '.join(FORMATS)}")
    return a
