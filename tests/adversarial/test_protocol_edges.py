"""docs/PROTOCOL.md and the node agree on the edges a client built from the document alone ran into: one
conformance test per point (D1–D8), each holding the node to what the document says.

D1 §6.1   a request that is not exactly {"v": 2, "swarm", "sha256"} (an extra key, `v` 2.0) is `bad_request`
D2 §6.2   a frame started and not finished on a stream left open: `fetch_failed` at the timeout; a stream
          that ends inside the frame: `bad_announcement`
D3 §5     `addrs` are separated by single spaces: two spaces, a tab or a leading space make it malformed
D4 §6.3   a push answered `ok` and then silent counts `fetch_timeout`, as §8.1 defines it
D5 §3     a count-0 announcement is a hello: the peer is seen, nothing is fetched, its standing is untouched
D6 §7     drops made before a fetch (steps 1–4) back nobody off; an announcement of a backed-off peer: `backoff`
D7 §3     a decoded `records` array one over the cap is `too_many_records` (the check at decode is live)
D8 §5     relayed (/p2p-circuit) addresses are not carried in `addrs`: left out by a publisher, malformed to a receiver
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import msgpack
import pytest
import zstandard

from bench.harness.records import record as _record
from protocols.addrs import decode_addrs, encode_addrs
from protocols.codec import RecordError, decode_bundle
from swarm.exchange.admission import DownloadSlots
from swarm.exchange.push import receive_push
from swarm.exchange.standing import BACKOFF, NEW
from swarm.exchange.transport import Inbox, Limits, make_bundle
from swarm.net.wire import FetchError, decode_request, encode_request
from tests.unit.protocols.test_wire import _frames, _Writer

SHA_A = "a" * 64
PEER = "QmPusher"


class _Closing(_Writer):
    def close(self) -> None:
        pass


class _Info:
    class peer_id:  # noqa: N801 - the shape of hivemind's StreamInfo.peer_id
        @staticmethod
        def to_base58() -> str:
            return PEER


def _push(stream: bytes, *, eof: bool, timeout_s: float = 0.3) -> Counter:
    """Run the receiver side of a push over `stream`; the drops it counted."""
    inbox = Inbox(Limits())

    async def main():
        reader = asyncio.StreamReader()
        reader.feed_data(stream)
        if eof:
            reader.feed_eof()
        slots = DownloadSlots(4, is_good=lambda _p: False)
        await receive_push(_Info, reader, _Closing(), inbox=inbox, swarm_id="rlswarm", timeout_s=timeout_s,
                           slots=slots)
    asyncio.run(main())
    return inbox.take(0, 0).drops


def test_d1_a_request_that_is_not_exactly_the_map_is_a_bad_request():
    assert decode_request(encode_request("rlswarm", SHA_A)) == ("rlswarm", SHA_A)
    for obj in ({"v": 2, "swarm": "rlswarm", "sha256": SHA_A, "extra": 1},  # before: served `ok`
                {"v": 2.0, "swarm": "rlswarm", "sha256": SHA_A},  # before: served `ok`
                {"v": True, "swarm": "rlswarm", "sha256": SHA_A}):
        with pytest.raises(FetchError) as exc:
            decode_request(msgpack.packb(obj))
        assert exc.value.reason == "bad_request", obj


def test_d2_an_offer_frame_cut_short_on_an_open_stream_times_out_and_one_ended_inside_is_bad():
    started = (100).to_bytes(4, "big") + b"x" * 10  # a 100-byte frame of which 10 bytes came
    assert _push(started, eof=False) == Counter({"fetch_failed": 1})
    assert _push(started, eof=True) == Counter({"bad_announcement": 1})
    assert _push(b"", eof=False) == Counter({"fetch_failed": 1})  # no frame by then


def test_d3_addrs_are_separated_by_single_spaces():
    one, two = "/ip4/10.0.0.2/tcp/31337", "/ip4/127.0.0.1/tcp/31337"
    assert decode_addrs(f"{one} {two}") == f"{one} {two}" and decode_addrs("") == ""
    for text in (f"{one}  {two}", f"{one}\t{two}", f" {one}", f"{one} ", f"{one}\n"):
        with pytest.raises(ValueError):
            decode_addrs(text)  # before: two spaces, a tab, a leading or trailing blank were accepted


def test_d4_a_push_answered_ok_then_silent_counts_fetch_timeout():
    _, value, _ = make_bundle(PEER, [_record(PEER)])
    assert _push(_frames(value), eof=False) == Counter({"fetch_timeout": 1})  # before: fetch_failed
    assert _push(_frames(value), eof=True) == Counter({"fetch_failed": 1})  # a short stream: failed


def test_d5_a_count_zero_announcement_is_a_hello_never_fetched():
    inbox = Inbox(Limits())
    now = time.time()
    _, value, ann = make_bundle(PEER, [], now=now)
    assert ann.count == 0 and ann.nbytes > 0
    assert inbox.offer(value, PEER, now=now) is False  # vetted, not a candidate
    assert inbox.peers_seen() == 1 and inbox.choose(now) == []
    assert inbox.standing.state(PEER, now) == NEW and inbox.take(0, 0).drops == Counter()


def test_d6_drops_before_a_fetch_back_nobody_off_and_a_backed_off_peer_counts_backoff():
    inbox = Inbox(Limits())
    now = time.time()
    _, stale, _ = make_bundle(PEER, [_record(PEER, 1)], now=now - 3600)  # step 3: stale_age
    _, shard, _ = make_bundle(PEER, [_record(PEER, 2)], now=now)
    inbox.offer(stale, PEER, now=now)
    inbox.offer(shard, PEER, now=now, key_shard=99)  # step 2: under another peer's shard
    assert inbox.take(0, 0).drops == Counter({"stale_age": 1, "bad_announcement": 1})
    assert inbox.standing.state(PEER, now) == NEW
    _, fresh, ann = make_bundle(PEER, [_record(PEER, 3)], now=now)
    assert inbox.offer(fresh, PEER, now=now) and inbox.choose(now) == [ann]  # still fetched
    inbox.settle_fetched(ann, None, "rlswarm")  # step 6 failed: that backs it off
    assert inbox.standing.state(PEER, now) == BACKOFF
    _, later, _ = make_bundle(PEER, [_record(PEER, 4)], now=now)
    inbox.offer(later, PEER, now=now)
    assert inbox.take(0, 0).drops == Counter({"fetch_failed": 1, "backoff": 1})


def _records_array(n: int) -> bytes:
    """A bundle whose `records` array holds n copies of one record."""
    one = msgpack.unpackb(zstandard.ZstdDecompressor().decompress(
        make_bundle(PEER, [_record(PEER)])[0]), raw=False)
    return zstandard.ZstdCompressor().compress(msgpack.packb({"v": one["v"], "records": one["records"] * n}))


def test_d7_a_records_array_one_over_the_cap_is_too_many_records():
    records, drops = decode_bundle(_records_array(1024))
    assert len(records) == 1024 and drops == Counter()
    for n, reason in ((1025, "too_many_records"), (1026, "too_large")):  # before: 1025 was too_large too
        with pytest.raises(RecordError) as exc:
            decode_bundle(_records_array(n))
        assert exc.value.reason == reason, n


def test_d8_relayed_addresses_are_not_carried():
    relayed = "/ip4/198.51.100.7/tcp/4001/p2p/QmRelay/p2p-circuit"
    assert encode_addrs([relayed + "/p2p/QmSelf", "/ip4/10.0.0.2/tcp/4001/p2p/QmSelf"]) == "/ip4/10.0.0.2/tcp/4001"
    with pytest.raises(ValueError):
        decode_addrs(relayed)
