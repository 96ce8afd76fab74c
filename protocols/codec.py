"""Encode and decode wire records: msgpack (never pickle) inside one zstd frame (docs/PROTOCOL.md);
announcements are protocols.announce.

A *bundle* is what one peer publishes for one round: ``zstd(msgpack({"v", "records": [...]}))``.
Every limit of ``Caps`` is checked before the memory it guards is allocated:

- compressed size: ``len(data)`` before anything else;
- decompressed size: a streaming read in 1 MiB chunks that stops past ``max_decompressed_bytes``.
  (zstandard's one-shot ``decompress(max_output_size=…)`` trusts the frame's declared content
  size and ignores the cap when it is present — measured here: a 338-byte frame declaring 10 MiB
  decompresses in full under a 1000-byte cap — so it is not used.) A bundle is exactly one frame:
  a truncated frame and any byte after it (a second frame included) are errors, not ignored;
- strings, binaries, arrays and maps: msgpack's own ``max_*_len`` limits, applied while parsing
  (a hit fails the bundle as ``too_large``): strings ≤ max(4 · max_text_chars, 1024) UTF-8 bytes,
  binaries ≤ 4 · max_tokens bytes; prompt and completion text are then checked in characters;
  msgpack ext types, of any length, fail the bundle as ``msgpack`` (the protocol has none);
- completions per record, tokens per completion: before the packed arrays are unpacked;
- objects: bytes alone do not bound what they become — 5.6 KB of zstd holding 64 MiB of
  two-character strings in nested arrays decoded to 1.5 GB of Python objects in 4.4 s — so every
  array and map is counted as msgpack completes it (``Caps.max_objects``, derived from the
  record and completion caps) and the parse stops at the bound (``too_large``);
- tokens per bundle (``max_bundle_tokens``): packed ids and logprobs become Python tuples, so an
  8 KB bundle of 256 records × 64 completions × 1000 equal tokens decoded to 1.1 GB in 3.3 s;
  the running total is checked before each completion's arrays are unpacked (``too_large``);
- the receiver's own budget (``decode_bundle(completion_tokens=…)``): a completion longer than the
  receiver would ever train on is dropped (``completion_too_long``) before it is unpacked, not after
  it waited, decoded, for the next round — a 6.4 KB bundle of four 2^21-token completions decoded to
  ~144 MiB of objects that way;
- display strings: ``model.name`` is cut to MAX_NAME_CHARS printable characters (it reaches metrics).

A bundle that fails as a whole raises ``RecordError``; inside a bundle each bad record is dropped
on its own and counted by reason, so one malformed record never costs the others.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import msgpack
import numpy as np
import zstandard

from protocols.records import (
    FINISH_REASONS,
    SCHEMA_VERSION,
    Completion,
    ModelInfo,
    RolloutRecord,
    SamplingInfo,
    TaskRef,
)

ZSTD_LEVEL = 10  # level 19 saves 2–5 % on real bundles at 20–50× the CPU (bench/exchange/wire_bytes.py)
_READ_CHUNK = 1 << 20
_MIN_STR_BYTES = 1024  # room for fingerprints, peer ids and names whatever max_text_chars is
_F16_MIN = -65504.0  # most negative finite float16
_SHA256_HEX = frozenset("0123456789abcdef")
_LOGPROB_SLACK = 1e-3  # f16 rounding of values near 0 may land slightly above 0
MAX_NAME_CHARS = 64  # `model.name` is display only: a receiver keeps at most this many printable characters
CHARS_PER_TOKEN = 128  # completion text beyond this many characters per budgeted token is not decoded (see below)


class RecordError(ValueError):
    """Untrusted bytes that are not a valid record; ``reason`` is the drop-counter label."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass(frozen=True)
class Caps:
    """Decode limits (all checked before allocation)."""

    max_compressed_bytes: int = 16 << 20
    max_decompressed_bytes: int = 64 << 20
    max_records: int = 1024
    max_completions: int = 64
    max_tokens: int = 8192
    max_text_chars: int = 1 << 20
    max_bundle_tokens: int = 1 << 21

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Caps.{name} must be a positive int, got {value!r}")

    @property
    def max_objects(self) -> int:
        """Array items plus map keys and values in a whole bundle: a record at every cap holds
        13 per completion (6 keys, 6 values, its array slot; 14 allowed) and about 40 of its own (64 allowed), so any bundle within the record
        and completion caps fits, and nothing else does."""
        return 16 + self.max_records * (64 + 14 * self.max_completions)


DEFAULT_CAPS = Caps()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------- records <-> msgpack-ready dicts

def _id_dtype(vocab_size: int) -> str:
    return "<u2" if vocab_size <= 65536 else "<u4"


def record_to_wire(rec: RolloutRecord, *, logprob_dtype: str = "f16") -> dict[str, Any]:
    """The msgpack-ready form of one record: token ids and logprobs as packed little-endian bytes.

    Raises ValueError for a record no receiver would accept (ids outside [0, vocab_size), ids and
    logprobs of different lengths, a non-finite logprob), so a node never publishes what it would
    drop itself. Float16 logprobs below −65504 are clamped to it rather than overflowing to −inf
    (e^−65504 is 0 in any float format, so no ratio changes).
    """
    if logprob_dtype not in ("f16", "f32"):
        raise ValueError(f"logprob_dtype must be 'f16' or 'f32', got {logprob_dtype!r}")
    lp_dtype = "<f2" if logprob_dtype == "f16" else "<f4"
    vocab = rec.model.vocab_size
    completions = []
    for c in rec.completions:
        if len(c.token_ids) != len(c.logprobs):
            raise ValueError(f"completion has {len(c.token_ids)} token ids but {len(c.logprobs)} logprobs")
        ids = np.asarray(c.token_ids, dtype=np.int64)  # [L]
        lps = np.asarray(c.logprobs, dtype=np.float64)  # [L]
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
            raise ValueError(f"token id outside [0, {vocab}) in completion")
        if not np.all(np.isfinite(lps)):
            raise ValueError("completion has a non-finite logprob")
        if logprob_dtype == "f16":
            lps = np.maximum(lps, _F16_MIN)
        wire = {
            "text": c.text,
            "token_ids": ids.astype(_id_dtype(vocab)).tobytes(),
            "logprobs": lps.astype(lp_dtype).tobytes(),
            "finish_reason": c.finish_reason,
            "reward_claimed": c.reward_claimed,
        }
        if c.token_bytes is not None:
            nb = np.asarray(c.token_bytes, dtype=np.int64)
            if nb.shape != ids.shape or (nb.size and (int(nb.min()) < 0 or int(nb.max()) > 0xFFFF)) \
                    or int(nb.sum()) != len(c.text.encode("utf-8")):
                raise ValueError("token_bytes must give each token's bytes of text (0..65535, summing to its length)")
            wire["token_bytes"] = nb.astype("<u2").tobytes()
        completions.append(wire)
    return {
        "v": rec.v, "swarm": rec.swarm, "peer": rec.peer, "round": rec.round,
        "policy_version": rec.policy_version, "created_at": rec.created_at,
        "model": asdict(rec.model), "sampling": asdict(rec.sampling), "task": asdict(rec.task),
        "prompt": rec.prompt, "lp": logprob_dtype, "completions": completions,
    }


def _get(d: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(d, dict):
        raise RecordError("schema", f"{where} is not a map")
    if key not in d:
        raise RecordError("schema", f"{where}.{key} missing")
    value = d[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise RecordError("schema", f"{where}.{key} has type {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise RecordError("schema", f"{where}.{key} is not finite")
    return value


def display_name(name: str) -> str:
    """A peer-supplied display string as a receiver keeps it: at most MAX_NAME_CHARS characters, every
    non-printable one replaced by "?" (it reaches logs, metrics lines, Prometheus labels and the dashboard)."""
    return "".join(ch if ch.isprintable() else "?" for ch in name[:MAX_NAME_CHARS])


def _text(d: Any, key: str, where: str, caps: Caps) -> str:
    """A free-text field, bounded in characters (msgpack bounded its bytes at 4 per character)."""
    value = _get(d, key, str, where)
    if len(value) > caps.max_text_chars:
        raise RecordError("too_long", f"{where}.{key} has {len(value)} > {caps.max_text_chars} characters")
    return value


class _TokenBudget:
    """Tokens left for the rest of a bundle (Caps.max_bundle_tokens), spent before unpacking; and the
    receiver's own budget per completion (None: only the caps), checked before anything is unpacked."""

    def __init__(self, tokens: int, per_completion: int | None = None):
        self.left = tokens
        self.per_completion = per_completion

    def spend(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise _BundleError("too_large", "the bundle holds more tokens than max_bundle_tokens")


class _BundleError(RecordError):
    """A limit of the whole bundle hit while decoding one record: the bundle fails, not the record."""


def _completion_from_wire(d: Any, vocab_size: int, lp: str, caps: Caps, budget: _TokenBudget | None) -> Completion:
    text = _text(d, "text", "completion", caps)
    ids_raw = _get(d, "token_ids", bytes, "completion")
    lps_raw = _get(d, "logprobs", bytes, "completion")
    finish = _get(d, "finish_reason", str, "completion")
    claimed = d.get("reward_claimed")
    if finish not in FINISH_REASONS:
        raise RecordError("schema", f"finish_reason {finish!r}")
    if claimed is not None and (isinstance(claimed, bool) or not isinstance(claimed, (int, float))
                                or not math.isfinite(claimed)):
        raise RecordError("schema", "reward_claimed is not a finite number")
    id_dtype = np.dtype(_id_dtype(vocab_size))
    lp_dtype = np.dtype("<f2" if lp == "f16" else "<f4")
    if len(ids_raw) % id_dtype.itemsize or len(lps_raw) % lp_dtype.itemsize:
        raise RecordError("schema", "packed array length is not a multiple of its item size")
    n = len(ids_raw) // id_dtype.itemsize
    if n > caps.max_tokens:
        raise RecordError("too_many_tokens", f"{n} > {caps.max_tokens}")
    if n == 0:
        raise RecordError("schema", "completion has no tokens")
    if len(lps_raw) // lp_dtype.itemsize != n:
        raise RecordError("length_mismatch", "token ids and logprobs differ in length")
    if budget is not None and budget.per_completion is not None and (
            n > budget.per_completion or len(text) > budget.per_completion * CHARS_PER_TOKEN):
        raise RecordError("completion_too_long", f"{n} tokens / {len(text)} characters over the receiver's "
                          f"budget of {budget.per_completion} tokens")
    if budget is not None:
        budget.spend(n)
    ids = np.frombuffer(ids_raw, dtype=id_dtype)
    lps = np.frombuffer(lps_raw, dtype=lp_dtype).astype(np.float32)
    if int(ids.max()) >= vocab_size:
        raise RecordError("token_out_of_vocab", f"id {int(ids.max())} >= vocab_size {vocab_size}")
    if not np.all(np.isfinite(lps)) or float(lps.max()) > _LOGPROB_SLACK:
        raise RecordError("bad_logprob", "logprobs must be finite and <= 0")
    return Completion(text, tuple(ids.tolist()), tuple(np.minimum(lps, 0.0).tolist()), finish,
                      None if claimed is None else float(claimed), _token_bytes(d, n, text))


def _token_bytes(d: dict, n: int, text: str) -> tuple[int, ...] | None:
    """The optional per-token byte counts: n uint16 values summing to the UTF-8 length of text."""
    raw = d.get("token_bytes")
    if raw is None:
        return None
    if not isinstance(raw, bytes) or len(raw) != 2 * n:
        raise RecordError("schema", "token_bytes is not one uint16 per token")
    nb = np.frombuffer(raw, dtype="<u2")
    if int(nb.sum(dtype=np.int64)) != len(text.encode("utf-8")):
        raise RecordError("schema", "token_bytes do not add up to the text's UTF-8 length")
    return tuple(nb.tolist())


def record_from_wire(d: Any, caps: Caps = DEFAULT_CAPS, budget: _TokenBudget | None = None) -> RolloutRecord:
    """Validate one decoded map into a RolloutRecord, or raise RecordError(reason)."""
    v = _get(d, "v", int, "record")
    if v != SCHEMA_VERSION:
        raise RecordError("version", f"schema v{v}, this node speaks v{SCHEMA_VERSION}")
    m, s, t = _get(d, "model", dict, "record"), _get(d, "sampling", dict, "record"), _get(d, "task", dict, "record")
    model = ModelInfo(display_name(_get(m, "name", str, "model")), _get(m, "tokenizer", str, "model"),
                      _get(m, "vocab_size", int, "model"))
    if not 0 < model.vocab_size <= 1 << 24:
        raise RecordError("schema", f"vocab_size {model.vocab_size}")
    if len(model.tokenizer) != 64 or not set(model.tokenizer) <= _SHA256_HEX:
        raise RecordError("schema", "tokenizer fingerprint is not a sha256 hex digest")
    sampling = SamplingInfo(_get(s, "temperature", float, "sampling"), _get(s, "top_p", float, "sampling"),
                            _get(s, "max_new_tokens", int, "sampling"))
    if not (sampling.temperature > 0 and 0 < sampling.top_p <= 1 and sampling.max_new_tokens > 0):
        raise RecordError("schema", "sampling parameters out of range")
    task = TaskRef(_get(t, "dataset", str, "task"), _get(t, "config", dict, "task"),
                   _get(t, "seed", int, "task"), _get(t, "index", int, "task"))
    if task.index < 0 or not all(isinstance(k, str) for k in task.config):
        raise RecordError("schema", "task index < 0 or non-string config key")
    lp = _get(d, "lp", str, "record")
    if lp not in ("f16", "f32"):
        raise RecordError("schema", f"logprob dtype {lp!r}")
    raw = _get(d, "completions", list, "record")
    if len(raw) > caps.max_completions:
        raise RecordError("too_many_completions", f"{len(raw)} > {caps.max_completions}")
    if not raw:
        raise RecordError("schema", "record has no completions")
    round_, version = _get(d, "round", int, "record"), _get(d, "policy_version", int, "record")
    if round_ < 0 or version < 0:
        raise RecordError("schema", "negative round or policy_version")
    return RolloutRecord(
        swarm=_get(d, "swarm", str, "record"), peer=_get(d, "peer", str, "record"), round=round_,
        policy_version=version, created_at=_get(d, "created_at", float, "record"),
        model=model, sampling=sampling, task=task, prompt=_text(d, "prompt", "record", caps),
        completions=tuple(_completion_from_wire(c, model.vocab_size, lp, caps, budget) for c in raw), v=v)


# ---------------------------------------------------------------- bytes

class _TooManyObjects(Exception):
    pass


def _unpack(payload: bytes, caps: Caps) -> Any:
    left = caps.max_objects

    def items(array: list) -> list:  # msgpack calls these as each array / map is completed
        nonlocal left
        left -= len(array)
        if left < 0:
            raise _TooManyObjects
        return array

    def pairs(kvs: list) -> dict:  # every pair, duplicate keys included
        items(kvs)
        items(kvs)
        return dict(kvs)

    def no_ext(code: int, _data: bytes) -> Any:  # an empty ext (max_ext_len 0 stops the others)
        raise ValueError(f"msgpack ext type {code}: not allowed on the wire")

    try:
        return msgpack.unpackb(
            payload, raw=False, strict_map_key=True, use_list=True, list_hook=items, object_pairs_hook=pairs,
            max_str_len=max(caps.max_text_chars * 4, _MIN_STR_BYTES), max_bin_len=caps.max_tokens * 4,
            max_array_len=max(caps.max_records, caps.max_completions) + 1, max_map_len=64, max_ext_len=0,
            ext_hook=no_ext)
    except _TooManyObjects:
        raise RecordError("too_large", f"more than {caps.max_objects} msgpack objects") from None
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, TypeError) as exc:
        # "<n> exceeds max_<kind>_len(<cap>)": a length limit stopped the parse (an ext type of any length: msgpack)
        reason = "too_large" if "exceeds max_" in str(exc) and "ext_len(" not in str(exc) else "msgpack"
        raise RecordError(reason, str(exc)[:200]) from None


def _decompress(data: bytes, caps: Caps) -> bytes:
    """Stream-decompress at most max_decompressed_bytes + 1 bytes, never trusting the frame header."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise RecordError("schema", f"payload is {type(data).__name__}, not bytes")
    size = memoryview(data).nbytes
    if size > caps.max_compressed_bytes:
        raise RecordError("too_large", f"{size} compressed bytes > {caps.max_compressed_bytes}")
    data = bytes(data)
    chunks, total = [], 0
    try:
        with zstandard.ZstdDecompressor().stream_reader(data) as reader:  # the first frame only
            while chunk := reader.read(min(_READ_CHUNK, caps.max_decompressed_bytes - total + 1)):
                total += len(chunk)
                if total > caps.max_decompressed_bytes:
                    raise RecordError("too_large", f"decompresses beyond {caps.max_decompressed_bytes} bytes")
                chunks.append(chunk)
        # The bounded read proved the first frame fits the cap, so a second pass over it is bounded
        # too; it tells where the frame ends, which the reader does not: a truncated frame, and any
        # byte after it (a second frame included), are errors rather than silently ignored.
        ends = zstandard.ZstdDecompressor().decompressobj()
        ends.decompress(data)
    except zstandard.ZstdError as exc:
        raise RecordError("zstd", str(exc)[:200]) from None
    if not ends.eof:
        raise RecordError("zstd", "truncated or missing zstd frame")
    if ends.unused_data:
        raise RecordError("zstd", f"{len(ends.unused_data)} bytes after the zstd frame")
    return b"".join(chunks)


def _compress(obj: Any) -> bytes:
    return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(msgpack.packb(obj, use_bin_type=True))


def encode_record(rec: RolloutRecord, *, logprob_dtype: str = "f16") -> bytes:
    return _compress(record_to_wire(rec, logprob_dtype=logprob_dtype))


def decode_record(data: bytes, caps: Caps = DEFAULT_CAPS) -> RolloutRecord:
    return record_from_wire(_unpack(_decompress(data, caps), caps), caps)


def encode_bundle(records: list[RolloutRecord] | tuple[RolloutRecord, ...], *, logprob_dtype: str = "f16") -> bytes:
    """One bundle: records published together, in one zstd frame (compression sees them together)."""
    return _compress({"v": SCHEMA_VERSION, "records": [record_to_wire(r, logprob_dtype=logprob_dtype)
                                                       for r in records]})


def decode_bundle(data: bytes, caps: Caps = DEFAULT_CAPS, completion_tokens: int | None = None
                  ) -> tuple[list[RolloutRecord], Counter]:
    """(valid records, Counter of drop reasons). Raises RecordError only if the bundle itself is bad.

    `completion_tokens`: the receiver's own budget per completion; a record with a longer completion (or
    one whose text exceeds CHARS_PER_TOKEN characters per budgeted token) is dropped as
    `completion_too_long` before its arrays are unpacked."""
    obj = _unpack(_decompress(data, caps), caps)
    if _get(obj, "v", int, "bundle") != SCHEMA_VERSION:
        raise RecordError("version", f"bundle v{obj['v']}, this node speaks v{SCHEMA_VERSION}")
    raw = _get(obj, "records", list, "bundle")
    if len(raw) > caps.max_records:
        raise RecordError("too_many_records", f"{len(raw)} > {caps.max_records}")
    records, drops, budget = [], Counter(), _TokenBudget(caps.max_bundle_tokens, completion_tokens)
    for d in raw:
        try:
            records.append(record_from_wire(d, caps, budget))
        except _BundleError:
            raise
        except RecordError as exc:
            drops[exc.reason] += 1
    return records, drops
