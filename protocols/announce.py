"""Announcements on the wire: the small msgpack map that names one bundle (docs/PROTOCOL.md §5), checked
before any byte of the bundle is fetched. ``unpack_small_map`` also reads the weight channel's values."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import msgpack

from protocols.addrs import decode_addrs
from protocols.codec import _SHA256_HEX, RecordError, _get
from protocols.keys import MAX_ANN_LEVEL
from protocols.records import SCHEMA_VERSION, Announcement


def encode_announcement(a: Announcement) -> bytes:
    d = asdict(a)
    if not d["addrs"]:
        del d["addrs"]  # no dial hint: exactly the fields of an announcement without one
    if d["level"] < 0:
        del d["level"]  # not gossiped on announcement shards: exactly the fields of the previous version's
    return msgpack.packb(d, use_bin_type=True)


def unpack_small_map(data: Any, limit: int = 1024) -> Any:
    """Unpack an announcement-sized msgpack value (≤ limit bytes, flat: short strings, ≤ 16 keys, no arrays,
    binaries or extensions) or raise RecordError("bad_announcement"); the caller checks the fields."""
    if not isinstance(data, (bytes, bytearray)) or len(data) > limit:
        raise RecordError("bad_announcement", "not bytes or larger than 1 KiB")
    try:
        return msgpack.unpackb(bytes(data), raw=False, max_str_len=256, max_array_len=0, max_map_len=16,
                               max_bin_len=0, max_ext_len=0)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, TypeError) as exc:
        raise RecordError("bad_announcement", str(exc)[:200]) from None


def _level(d: dict) -> int:
    """The optional `level` (0..MAX_ANN_LEVEL, protocols.keys); -1 when absent."""
    if "level" not in d:
        return -1
    level = d["level"]
    if type(level) is not int or not 0 <= level <= MAX_ANN_LEVEL:
        raise RecordError("bad_announcement", f"level {level!r:.20} is not an integer in 0..{MAX_ANN_LEVEL}")
    return level


def decode_announcement(data: Any) -> Announcement:
    """Validate a DHT announcement value (≤ 1 KiB msgpack map) or raise RecordError."""
    d = unpack_small_map(data)
    try:
        if isinstance(d, dict) and type(d.get("v")) is int and d["v"] != SCHEMA_VERSION:
            raise RecordError("version", f"announcement v{d.get('v')!r}, this node speaks v{SCHEMA_VERSION}")
        a = Announcement(peer=_get(d, "peer", str, "ann"), window=_get(d, "window", int, "ann"),
                         count=_get(d, "count", int, "ann"), nbytes=_get(d, "nbytes", int, "ann"),
                         sha256=_get(d, "sha256", str, "ann"), policy_version=_get(d, "policy_version", int, "ann"),
                         created_at=_get(d, "created_at", float, "ann"), v=_get(d, "v", int, "ann"),
                         addrs=decode_addrs(d.get("addrs", "")), level=_level(d))
    except ValueError as exc:  # RecordError (a ValueError) included
        if isinstance(exc, RecordError) and exc.reason == "version":
            raise
        raise RecordError("bad_announcement", str(exc)) from None
    if a.window < 0 or a.count < 0 or a.nbytes <= 0 or a.policy_version < 0 or not math.isfinite(a.created_at):
        raise RecordError("bad_announcement", "window, count, size, version or time out of range")
    if len(a.sha256) != 64 or not set(a.sha256) <= _SHA256_HEX:
        raise RecordError("bad_announcement", "sha256 is not a hex digest")
    return a
