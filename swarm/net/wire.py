"""Bundle transfer and announcement pushes over libp2p streams: framing, serving, fetching, pushing one frame
(`notify`). The weight stream (swarm.weights.hivemind) and the score stream (swarm.exchange.score_stream) use the same
framing; `swarm doctor` reads a peer's info with it (swarm.host.doctor).

Protocol (docs/PROTOCOL.md §6): the fetcher opens a stream to the publisher with the protocol
id ``HANDLER_NAME`` and writes one request frame; the publisher answers with one header frame
and, when the status is ``ok``, the bundle bytes as data frames of at most ``MAX_CHUNK`` bytes,
then closes the stream. A publisher pushes a fresh announcement to a peer by opening a stream
with ``NOTIFY_NAME`` and writing it as one frame (≤ ``MAX_ANNOUNCEMENT`` bytes); the receiver
takes the sender's identity from the authenticated stream, never from the frame. A publisher
that cannot be dialled (client mode) offers a bundle over ``PUSH_NAME``: the announcement frame,
the receiver's header (``ok``: send it now, ``declined``: not now), then the data frames.

``busy`` (docs/PROTOCOL.md §6.1): a publisher whose admission has no room for a bundle stream
(swarm.exchange.admission) answers it with a header of status ``busy`` and ``retry_after`` seconds
before it closes it, instead of closing it unread; the receiver tries again later and does not count
the publisher failed. A receiver of an older version reads it as any status other than ``ok``.

    frame    = u32 big-endian length ‖ payload
    request  = msgpack {"v": 2, "swarm": str, "sha256": str (64 hex)}                  ≤ 4 KiB
    header   = msgpack {"v": 2, "status": "ok" | "not_found" | "bad_request" | "declined" | "busy", "nbytes": int,
                        "sha256": str, "retry_after": float (busy only)}              ≤ 4 KiB
    data     = 1..MAX_CHUNK bytes each, until Σ len = nbytes
    notify   = the announcement's msgpack bytes (the DHT value), one frame           ≤ 1 KiB
    push     = notify frame → header ← data frames → (only after "ok")
    info     = msgpack {"v": 2, "swarm": str, "time": float} ← one frame, on INFO_NAME   ≤ 1 KiB

Hazards handled here: a length prefix is checked against its limit *before* reading the payload
(the peer controls it); the running total is checked against the announced size before each
chunk is accepted, so a lying publisher costs at most one chunk beyond the announcement; the
digest is checked once at the end. Callers bound every call with ``asyncio.wait_for``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections.abc import Callable

import msgpack

HANDLER_NAME = "/rlswarm/bundle/2"  # libp2p protocol id of the bundle stream handler
NOTIFY_NAME = "/rlswarm/notify/2"  # libp2p protocol id of the announcement push
PUSH_NAME = "/rlswarm/push/2"  # libp2p protocol id of a bundle pushed by a peer that cannot be dialled
INFO_NAME = "/rlswarm/info/2"  # libp2p protocol id of a node's swarm id, protocol version and clock (`swarm doctor`)
WIRE_VERSION = 2
MAX_ANNOUNCEMENT = 1024  # an announcement is at most 1 KiB (protocols.codec.decode_announcement)
MAX_CHUNK = 1 << 20  # one data frame; well under hivemind's 4 MiB message cap
MAX_CONTROL = 4096  # request and header frames
BUSY = "busy"  # a publisher's answer to a bundle stream its admission has no room for
BUSY_RETRY_S = 1.0  # the retry_after a publisher names in a busy answer
RETRY_RANGE_S = (0.1, 10.0)  # a receiver bounds the retry_after it is told to this
BUSY_WAIT_S = 2.0  # a busy answer waits this long at most for the request, and as long to write the answer
_SHA256_RE = re.compile(r"[0-9a-f]{64}")


class FetchError(Exception):
    """A bundle could not be fetched; ``reason`` is the drop-counter label."""

    def __init__(self, reason: str, detail: str = "", retry_after_s: float | None = None):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.retry_after_s = retry_after_s  # a busy answer's retry_after, bounded to RETRY_RANGE_S (else None)


async def write_frame(writer: asyncio.StreamWriter, payload: bytes) -> None:
    writer.write(len(payload).to_bytes(4, "big"))
    writer.write(payload)
    await writer.drain()


async def read_frame(reader: asyncio.StreamReader, max_len: int, reason: str = "bad_frame") -> bytes:
    """One frame of 1..max_len bytes; a longer (or empty) announced length raises before any read."""
    try:
        n = int.from_bytes(await reader.readexactly(4), "big")
        if not 0 < n <= max_len:
            raise FetchError(reason, f"frame of {n} bytes (limit {max_len})")
        return await reader.readexactly(n)
    except asyncio.IncompleteReadError as exc:
        raise FetchError("stream_closed", f"after {len(exc.partial)} bytes of a frame") from exc


def encode_request(swarm: str, sha256: str) -> bytes:
    return msgpack.packb({"v": WIRE_VERSION, "swarm": swarm, "sha256": sha256})


def decode_request(data: bytes) -> tuple[str, str]:
    """(swarm, sha256) of a request frame; FetchError("bad_request") on anything else."""
    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated exception types on garbage
        raise FetchError("bad_request", f"not msgpack: {exc}") from exc
    if not (isinstance(obj, dict) and set(obj) == {"v", "swarm", "sha256"} and type(obj["v"]) is int
            and obj["v"] == WIRE_VERSION and isinstance(obj["swarm"], str) and isinstance(obj["sha256"], str)
            and _SHA256_RE.fullmatch(obj["sha256"])):  # exactly that map: no extra key, `v` the integer 2
        raise FetchError("bad_request", f"malformed request {obj!r:.200}")
    return obj["swarm"], obj["sha256"]


def encode_header(status: str, nbytes: int = 0, sha256: str = "", retry_after_s: float | None = None) -> bytes:
    header = {"v": WIRE_VERSION, "status": status, "nbytes": nbytes, "sha256": sha256}
    if retry_after_s is not None:
        header["retry_after"] = float(retry_after_s)
    return msgpack.packb(header)


def _header(data: bytes) -> dict:
    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as exc:
        raise FetchError("bad_header", f"not msgpack: {exc}") from exc
    if not (isinstance(obj, dict) and obj.get("v") == WIRE_VERSION and isinstance(obj.get("status"), str)
            and type(obj.get("nbytes")) is int and isinstance(obj.get("sha256"), str)):
        raise FetchError("bad_header", f"malformed header {obj!r:.200}")
    return obj


def decode_header(data: bytes) -> tuple[str, int, str]:
    obj = _header(data)
    return obj["status"], obj["nbytes"], obj["sha256"]


def retry_after(obj: dict) -> float:
    """A busy header's `retry_after`, bounded to RETRY_RANGE_S (BUSY_RETRY_S when absent or not a number)."""
    t = obj.get("retry_after")
    if type(t) not in (int, float) or t != t:  # absent, another type, or NaN
        t = BUSY_RETRY_S
    return min(max(float(t), RETRY_RANGE_S[0]), RETRY_RANGE_S[1])


async def answer_busy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      retry_after_s: float = BUSY_RETRY_S, wait_s: float = BUSY_WAIT_S) -> None:
    """Answer a bundle stream the admission has no room for: read its request (closing a stream with the request
    unread resets it, and the answer was lost over real p2pd), write a busy header, close. Each step bounded by
    wait_s; whatever fails, the stream is closed."""
    try:
        await asyncio.wait_for(read_frame(reader, MAX_CONTROL, "bad_request"), wait_s)
        await asyncio.wait_for(write_frame(writer, encode_header(BUSY, retry_after_s=retry_after_s)), wait_s)
    except (asyncio.TimeoutError, ConnectionError, FetchError):
        pass
    finally:
        writer.close()


log = logging.getLogger(__name__)
Lookup = Callable[[str, str], "bytes | None"]  # (swarm, sha256) -> bundle bytes or None


async def serve_bundle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, lookup: Lookup,
                       allow: Callable[[str], bool] = lambda _sha: True) -> str:
    """Answer one request; returns the status sent. `allow(sha256)`: False declines a bundle we do serve (the
    requester had it already, swarm.exchange.admission). The caller bounds it with a timeout."""
    try:
        swarm, sha = decode_request(await read_frame(reader, MAX_CONTROL, "bad_request"))
    except FetchError as exc:
        await write_frame(writer, encode_header("bad_request"))
        return exc.reason
    data = lookup(swarm, sha)
    if data is None:
        await write_frame(writer, encode_header("not_found"))
        return "not_found"
    if not allow(sha):
        await write_frame(writer, encode_header("declined"))
        return "declined"
    await write_frame(writer, encode_header("ok", len(data), sha))
    await write_data(writer, data)
    return "ok"


async def serve_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, lookup: Lookup,
                       timeout_s: float, what: str, allow: Callable[[str], bool] = lambda _sha: True) -> None:
    """A stream handler's body: answer one request within timeout_s, log a failure, always close."""
    try:
        await asyncio.wait_for(serve_bundle(reader, writer, lookup, allow), timeout_s)
    except (asyncio.TimeoutError, ConnectionError, FetchError) as exc:
        log.info("serving %s failed: %r", what, exc)
    finally:
        writer.close()


async def write_data(writer: asyncio.StreamWriter, data: bytes) -> None:
    view = memoryview(data)
    for offset in range(0, len(view), MAX_CHUNK):
        await write_frame(writer, bytes(view[offset:offset + MAX_CHUNK]))


async def fetch_bundle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                       swarm: str, sha256: str, nbytes: int) -> bytes:
    """Request the bundle announced as (sha256, nbytes) and return its verified bytes.

    Raises FetchError with reason busy (with its retry_after_s) | not_served | size_mismatch | digest_mismatch |
    bad_header | bad_frame | stream_closed. ``nbytes`` must already be within the receiver's caps.
    """
    try:
        await write_frame(writer, encode_request(swarm, sha256))
    except ConnectionError:  # a publisher that answered busy without reading may have closed the stream already:
        pass  # its answer is in our buffer (nothing there: the read below fails as stream_closed)
    header = _header(await read_frame(reader, MAX_CONTROL, "bad_header"))
    status, got_nbytes, got_sha = header["status"], header["nbytes"], header["sha256"]
    if status == BUSY:
        raise FetchError(BUSY, "publisher busy", retry_after_s=retry_after(header))
    if status != "ok":
        raise FetchError("not_served", f"publisher answered {status!r}")
    if got_nbytes != nbytes:
        raise FetchError("size_mismatch", f"header says {got_nbytes} bytes, announcement {nbytes}")
    if got_sha != sha256:
        raise FetchError("digest_mismatch", "header digest differs from the announcement")
    return await read_data(reader, sha256=sha256, nbytes=nbytes)


async def read_data(reader: asyncio.StreamReader, *, sha256: str, nbytes: int) -> bytes:
    """Data frames up to exactly `nbytes`, each prefix checked before its read, the digest at the end."""
    parts, total = [], 0
    while total < nbytes:
        chunk = await read_frame(reader, MAX_CHUNK)
        total += len(chunk)
        if total > nbytes:
            raise FetchError("size_mismatch", f"more than the announced {nbytes} bytes")
        parts.append(chunk)
    data = b"".join(parts)
    if hashlib.sha256(data).hexdigest() != sha256:
        raise FetchError("digest_mismatch", "bundle bytes do not hash to the announced sha256")
    return data


async def read_notification(reader: asyncio.StreamReader) -> bytes:
    """The one announcement frame of a push (its length checked before it is read)."""
    return await read_frame(reader, MAX_ANNOUNCEMENT, "bad_announcement")


async def push_bundle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, announcement: bytes,
                      data: bytes) -> str:
    """Publisher side of a push: offer `announcement`, send `data` if the receiver answers ``ok``.

    Returns the receiver's status (``ok`` once every byte is written, else e.g. ``declined``)."""
    await write_frame(writer, announcement)
    status, _, _ = decode_header(await read_frame(reader, MAX_CONTROL, "bad_header"))
    if status == "ok":
        await write_data(writer, data)
    return status


async def decline_push(writer: asyncio.StreamWriter, status: str = "declined") -> None:
    await write_frame(writer, encode_header(status))


async def accept_push(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, sha256: str,
                      nbytes: int) -> bytes:
    """Receiver side, after vetting the offered announcement: ask for the bytes, return them verified
    (the same checks as a fetch: FetchError size_mismatch | digest_mismatch | bad_frame | stream_closed)."""
    await write_frame(writer, encode_header("ok", nbytes, sha256))
    return await read_data(reader, sha256=sha256, nbytes=nbytes)


def encode_info(swarm: str, now: float) -> bytes:
    return msgpack.packb({"v": WIRE_VERSION, "swarm": swarm, "time": float(now)})


async def read_info(reader: asyncio.StreamReader) -> dict:
    """A peer's info frame as {"v": int, "swarm": str, "time": float}; FetchError("bad_info") otherwise.
    `v` is reported as sent, so that a caller can tell a peer of another protocol version."""
    data = await read_frame(reader, MAX_ANNOUNCEMENT, "bad_info")
    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as exc:
        raise FetchError("bad_info", f"not msgpack: {exc}") from exc
    if not (isinstance(obj, dict) and type(obj.get("v")) is int and isinstance(obj.get("swarm"), str)
            and isinstance(obj.get("time"), (int, float))):
        raise FetchError("bad_info", f"malformed info {obj!r:.200}")
    return {"v": obj["v"], "swarm": obj["swarm"][:64], "time": float(obj["time"])}


async def notify(open_stream_to, peer: str, protocol: str, value: bytes, timeout_s: float) -> None:
    """Write `value` as one frame on a new `protocol` stream to `peer` (`open_stream_to(peer, protocol)`). A push is
    a hint whose failure costs nothing (the DHT copy is the fallback), so a failure is only logged, never raised."""
    writer = None
    try:
        async def push() -> None:
            nonlocal writer
            _, writer = await open_stream_to(peer, protocol)
            await write_frame(writer, value)
        await asyncio.wait_for(push(), timeout_s)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # not listening, or gone: the DHT copy is the fallback
        log.info("push of %s to %s failed: %r", protocol, peer[:12], exc)
    finally:
        if writer is not None:
            writer.close()
