"""A skewed clock cannot lock a peer's announcements, and the receive rules the protocol document left open
without a network: tests/integration/test_clock_skew.py runs the DHT side on hivemind.

- A follower that took weights announced while the learner's clock was 100 s fast refused every later
  announcement until its own clock passed that date; now what it holds counts as dated no later than
  when it first saw it.
- Every store of ours under a DHT key expires later than the last one (swarm.dht.expiry).
- A bundle holding a msgpack ext type is refused as `msgpack` (an empty one was taken for a record and
  dropped as `schema`, a non-empty one refused as `too_large`); a records array over the cap is
  `too_large` when msgpack's own array limit stops it, `too_many_records` when it does not.
- A notify or offer frame over 1024 bytes is `bad_announcement`, read within the receiver's fetch
  timeout; a bundle request that does not parse is answered `bad_request`, a well-formed one for bytes
  the publisher does not serve `not_found`.
"""

from __future__ import annotations

import msgpack
import pytest
import zstandard

from protocols.codec import Caps, RecordError, decode_bundle
from swarm.dht.expiry import EPSILON_S, Expirations
from swarm.net.wire import (
    MAX_ANNOUNCEMENT,
    FetchError,
    decode_header,
    encode_request,
    read_notification,
    serve_bundle,
)
from swarm.weights.channel import WeightBook, WeightLimits, make_weight_announcement
from tests.unit.protocols.test_wire import _frames, _reader, _run, _Writer

L1 = "QmLearner1"


def test_weights_announced_with_a_fast_clock_do_not_outrank_the_next_ones():
    book = WeightBook([L1], "full", WeightLimits())
    fast, fast_value = make_weight_announcement(L1, 1, b"v1", "full", now=1100.0)  # clock 100 s fast
    assert book.offer(L1, L1, fast_value, now=1000.0) == fast  # within max_clock_skew_s: taken
    assert book.settle(fast, b"v1", now=1001.0) and book.take().version == 1
    right, right_value = make_weight_announcement(L1, 2, b"v2", "full", now=1010.0)  # the clock put right
    assert book.offer(L1, L1, right_value, now=1010.5) == right  # before: refused until our clock passed 1100
    assert book.settle(right, b"v2", now=1011.0) and book.take().version == 2
    older, older_value = make_weight_announcement(L1, 0, b"v0", "full", now=990.0)  # from before the fast one
    assert book.offer(L1, L1, older_value, now=1012.0) is None


def test_every_store_under_a_key_expires_later_than_the_last():
    exp = Expirations()
    assert exp.next("k", 1600.0) == 1600.0
    assert exp.next("k", 1590.0) == 1600.0 + EPSILON_S  # the clock stepped back: still later
    assert exp.next("k", 1700.0) == 1700.0
    assert exp.next("k", 1000.0, held=5200.0) == 5200.0 + EPSILON_S  # what the DHT holds for us, from a fast clock
    assert exp.next("other", 1000.0) == 1000.0


def _bundle(records) -> bytes:
    return zstandard.ZstdCompressor().compress(msgpack.packb({"v": 2, "records": records}, use_bin_type=True))


@pytest.mark.parametrize("ext", [msgpack.ExtType(5, b"abc"), msgpack.ExtType(5, b"")])
def test_a_msgpack_ext_type_refuses_the_bundle_as_msgpack(ext):
    with pytest.raises(RecordError) as exc:
        decode_bundle(_bundle([ext]))
    assert exc.value.reason == "msgpack"


def test_a_records_array_over_the_cap():
    with pytest.raises(RecordError) as exc:  # default caps: one over the cap is within msgpack's array limit (1025)
        decode_bundle(_bundle([{}] * 1025))
    assert exc.value.reason == "too_many_records"
    with pytest.raises(RecordError) as exc:  # beyond that limit msgpack stops the parse
        decode_bundle(_bundle([{}] * 1026))
    assert exc.value.reason == "too_large"
    with pytest.raises(RecordError) as exc:  # a larger completions cap lifts that limit: the records cap answers
        decode_bundle(_bundle([{}] * 1025), Caps(max_completions=2048))
    assert exc.value.reason == "too_many_records"


def test_a_notify_frame_over_1024_bytes_is_refused_before_it_is_read():
    with pytest.raises(FetchError) as exc:
        _run(lambda: read_notification(_reader(_frames(b"x" * (MAX_ANNOUNCEMENT + 1)), eof=False)))
    assert exc.value.reason == "bad_announcement"
    assert _run(lambda: read_notification(_reader(_frames(b"x" * MAX_ANNOUNCEMENT)))) == b"x" * MAX_ANNOUNCEMENT


def test_a_bundle_request_gets_bad_request_or_not_found():
    def serve(frame: bytes) -> tuple[str, str]:
        writer = _Writer()
        sent = _run(lambda: serve_bundle(_reader(_frames(frame)), writer, lambda swarm, sha: None))
        return sent, decode_header(bytes(writer.data[4:]))[0]
    assert serve(b"\xc1") == ("bad_request", "bad_request")  # not msgpack
    assert serve(msgpack.packb({"v": 2, "swarm": "s", "sha256": "not hex"})) == ("bad_request", "bad_request")
    assert serve(msgpack.packb({"v": 1, "swarm": "s", "sha256": "a" * 64})) == ("bad_request", "bad_request")
    assert serve(encode_request("s", "a" * 64)) == ("not_found", "not_found")  # well formed, not served (here)
