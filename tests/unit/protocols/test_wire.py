"""Bundle stream framing (swarm.net.wire) over in-process asyncio streams: limits checked before reads,
digest and size checks, short streams, requests and headers."""

from __future__ import annotations

import asyncio
import hashlib

import msgpack
import pytest

from swarm.net.wire import (
    BUSY,
    BUSY_RETRY_S,
    MAX_CHUNK,
    MAX_CONTROL,
    FetchError,
    answer_busy,
    decode_header,
    decode_request,
    encode_header,
    encode_request,
    fetch_bundle,
    read_frame,
    serve_bundle,
    write_frame,
)

SHA_A = "a" * 64


class _Writer:
    """The part of asyncio.StreamWriter the framing uses; collects what is written."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, b: bytes) -> None:
        self.data += b

    async def drain(self) -> None:
        return None


def _reader(data: bytes, eof: bool = True) -> asyncio.StreamReader:
    r = asyncio.StreamReader()
    r.feed_data(data)
    if eof:
        r.feed_eof()
    return r


def _run(make_coro):
    """Run ``make_coro()`` inside a fresh event loop (StreamReaders must be created inside one)."""
    async def main():
        return await asyncio.wait_for(make_coro(), 5.0)
    return asyncio.run(main())


def _frames(*payloads: bytes) -> bytes:
    return b"".join(len(p).to_bytes(4, "big") + p for p in payloads)


def test_frame_round_trip():
    w = _Writer()
    _run(lambda: write_frame(w, b"hello"))
    assert bytes(w.data) == b"\x00\x00\x00\x05hello"  # u32 big-endian 5, then the payload
    assert _run(lambda: read_frame(_reader(bytes(w.data)), 5)) == b"hello"


def test_oversize_length_prefix_is_rejected_before_reading():
    # announces 2^31 bytes and sends none; never EOF: a reader that tried to read would hang
    with pytest.raises(FetchError) as exc:
        _run(lambda: read_frame(_reader((1 << 31).to_bytes(4, "big"), eof=False), MAX_CONTROL, "bad_header"))
    assert exc.value.reason == "bad_header"
    with pytest.raises(FetchError) as exc:  # an empty frame is refused too
        _run(lambda: read_frame(_reader(b"\x00\x00\x00\x00"), 10))
    assert exc.value.reason == "bad_frame"


def test_short_stream_is_stream_closed():
    with pytest.raises(FetchError) as exc:
        _run(lambda: read_frame(_reader(b"\x00\x00\x00\x0aabc"), 100))  # 10 announced, 3 sent, EOF
    assert exc.value.reason == "stream_closed"
    with pytest.raises(FetchError) as exc:
        _run(lambda: read_frame(_reader(b"\x00\x00"), 100))  # EOF inside the length prefix
    assert exc.value.reason == "stream_closed"


def test_request_validation():
    assert decode_request(encode_request("rlswarm", SHA_A)) == ("rlswarm", SHA_A)
    bad = [b"\xc1", msgpack.packb([1, 2]),
           msgpack.packb({"v": 1, "swarm": "s", "round": 0, "sha256": SHA_A}),  # a v1 request
           msgpack.packb({"v": 2, "swarm": 3, "sha256": SHA_A}),
           msgpack.packb({"v": 2, "swarm": "s"}),
           msgpack.packb({"v": 2, "swarm": "s", "sha256": "A" * 64})]
    for data in bad:
        with pytest.raises(FetchError) as exc:
            decode_request(data)
        assert exc.value.reason == "bad_request"


async def _serve_then_fetch(data: bytes, *, announced_sha: str, announced_nbytes: int, served=None) -> bytes:
    """Run serve_bundle against a request written by fetch_bundle, through two in-memory pipes."""
    served = {("rlswarm", hashlib.sha256(data).hexdigest()): data} if served is None else served
    req_w = _Writer()
    # first pass: let the fetcher write its request (the answer stream is empty: it fails, expected)
    with pytest.raises(FetchError):
        await fetch_bundle(_reader(b""), req_w, swarm="rlswarm", sha256=announced_sha, nbytes=announced_nbytes)
    ans_w = _Writer()
    await serve_bundle(_reader(bytes(req_w.data)), ans_w, lambda s, h: served.get((s, h)))
    return await fetch_bundle(_reader(bytes(ans_w.data)), _Writer(), swarm="rlswarm",
                              sha256=announced_sha, nbytes=announced_nbytes)


def test_multi_chunk_bundle_round_trips():
    data = bytes(range(256)) * ((2 * MAX_CHUNK) // 256 + 3)  # 2 MiB + 768 B → 3 data frames
    sha = hashlib.sha256(data).hexdigest()
    assert _run(lambda: _serve_then_fetch(data, announced_sha=sha, announced_nbytes=len(data))) == data


def test_not_served_size_and_digest_mismatch():
    data = b"bundle bytes"
    sha = hashlib.sha256(data).hexdigest()
    cases = [
        (dict(announced_sha=SHA_A, announced_nbytes=len(data)), "not_served"),  # unknown digest
        (dict(announced_sha=sha, announced_nbytes=len(data) + 1), "size_mismatch"),  # header ≠ announcement
        # the publisher serves other bytes under the announced digest
        (dict(announced_sha=sha, announced_nbytes=len(data), served={("rlswarm", sha): b"other bytes!"}),
         "digest_mismatch"),
    ]
    for kwargs, reason in cases:
        with pytest.raises(FetchError) as exc:
            _run(lambda: _serve_then_fetch(data, **kwargs))
        assert exc.value.reason == reason


def test_publisher_sending_more_than_announced_is_cut_off():
    sha = hashlib.sha256(b"abcd").hexdigest()
    answer = _frames(encode_header("ok", 4, sha), b"abcdef")  # 6 data bytes for a 4-byte bundle
    with pytest.raises(FetchError) as exc:
        _run(lambda: fetch_bundle(_reader(answer), _Writer(), swarm="s", sha256=sha, nbytes=4))
    assert exc.value.reason == "size_mismatch"


def test_publisher_closing_early_is_stream_closed():
    sha = hashlib.sha256(b"abcdefgh").hexdigest()
    answer = _frames(encode_header("ok", 8, sha), b"abcd")  # 4 of 8 bytes, then EOF
    with pytest.raises(FetchError) as exc:
        _run(lambda: fetch_bundle(_reader(answer), _Writer(), swarm="s", sha256=sha, nbytes=8))
    assert exc.value.reason == "stream_closed"


def test_garbage_request_gets_bad_request_header():
    w = _Writer()
    status = _run(lambda: serve_bundle(_reader(_frames(b"\xc1")), w, lambda *a: b"never"))
    assert status == "bad_request"
    assert msgpack.unpackb(bytes(w.data[4:]))["status"] == "bad_request"


class _ClosingWriter(_Writer):
    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_a_busy_answer_is_a_header_with_a_bounded_retry_after():
    w = _ClosingWriter()
    _run(lambda: answer_busy(_reader(_frames(encode_request("s", SHA_A)), eof=False), w, 1.5))  # what a publisher
    assert w.closed  # writes on a bundle stream its admission has no room for, after reading the request
    with pytest.raises(FetchError) as exc:
        _run(lambda: fetch_bundle(_reader(bytes(w.data)), _Writer(), swarm="s", sha256=SHA_A, nbytes=4))
    assert exc.value.reason == BUSY and exc.value.retry_after_s == 1.5
    # what a publisher names is bounded by the receiver: never below 0.1 s, never above 10 s, a default when absent
    for told, bounded in [(0.0, 0.1), (-5, 0.1), (1e9, 10.0), (float("nan"), BUSY_RETRY_S), (None, BUSY_RETRY_S),
                          ("soon", BUSY_RETRY_S), (3, 3.0)]:
        header = msgpack.packb({"v": 2, "status": "busy", "nbytes": 0, "sha256": "", "retry_after": told})
        with pytest.raises(FetchError) as exc:
            _run(lambda: fetch_bundle(_reader(_frames(header)), _Writer(), swarm="s", sha256=SHA_A, nbytes=4))
        assert exc.value.reason == BUSY and exc.value.retry_after_s == bounded, told


def test_a_receiver_that_does_not_know_busy_reads_it_as_a_refusal():
    """Interop: the busy header is a version-2 header with one key more, which an older receiver's header check
    accepts (it reads v, status, nbytes, sha256 and ignores other keys) and treats as any status but ok."""
    w = _ClosingWriter()
    _run(lambda: answer_busy(_reader(_frames(encode_request("s", SHA_A))), w))
    payload = bytes(w.data[4:])
    assert decode_header(payload) == ("busy", 0, "")
    obj = msgpack.unpackb(payload)
    old_check = (isinstance(obj, dict) and obj.get("v") == 2 and isinstance(obj.get("status"), str)
                 and type(obj.get("nbytes")) is int and isinstance(obj.get("sha256"), str))  # the version-2 rule
    assert old_check and obj["status"] != "ok"


class _LostWriter(_Writer):
    async def drain(self) -> None:
        raise ConnectionResetError("Connection lost")


def test_a_busy_answer_is_read_even_when_the_publisher_closed_before_our_request_went_out():
    """Seen over real p2pd (tests/integration/test_busy_answer.py): the publisher answers busy and closes without
    reading, our request's write fails with `Connection lost`, and the answer is already in our buffer."""
    w = _ClosingWriter()
    _run(lambda: answer_busy(_reader(_frames(encode_request("s", SHA_A))), w, 2.0))
    with pytest.raises(FetchError) as exc:
        _run(lambda: fetch_bundle(_reader(bytes(w.data)), _LostWriter(), swarm="s", sha256=SHA_A, nbytes=4))
    assert exc.value.reason == BUSY and exc.value.retry_after_s == 2.0
    with pytest.raises(FetchError) as exc:  # nothing in the buffer: a short stream, as before
        _run(lambda: fetch_bundle(_reader(b""), _LostWriter(), swarm="s", sha256=SHA_A, nbytes=4))
    assert exc.value.reason == "stream_closed"


def test_a_busy_answer_waits_for_the_request_a_bounded_time_and_always_closes():
    w = _ClosingWriter()
    _run(lambda: answer_busy(_reader(b"", eof=False), w, wait_s=0.05))  # a requester that never writes
    assert w.closed and w.data == bytearray()
