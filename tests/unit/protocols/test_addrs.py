"""Dial hints in announcements (protocols.addrs, docs/PROTOCOL.md §5 `addrs`): what a publisher names, what a
receiver accepts, and that the receive rules keep the newest announcement's addresses per peer."""

from __future__ import annotations

import msgpack
import pytest

from protocols.addrs import MAX_ADDRS, MAX_CHARS, decode_addrs, encode_addrs
from protocols.announce import decode_announcement, encode_announcement
from protocols.codec import RecordError, sha256_hex
from protocols.records import Announcement
from swarm.exchange.transport import Inbox, Limits

PEER = "QmPublisher"
T0 = 1_700_000_000.0


def _ann(**kw) -> Announcement:
    base = dict(peer=PEER, window=170000000, count=1, nbytes=100, sha256=sha256_hex(b"x"), policy_version=0,
                created_at=T0)
    return Announcement(**{**base, **kw})


def test_a_publisher_names_its_direct_tcp_addresses_non_loopback_first():
    visible = ["/ip4/127.0.0.1/tcp/4001/p2p/QmSelf", "/ip4/10.0.0.2/tcp/4001/p2p/QmSelf",
               "/ip6/::1/tcp/4001/p2p/QmSelf", "/dns4/node.example.org/tcp/4001/p2p/QmSelf",
               "/ip4/10.0.0.2/udp/4001/quic/p2p/QmSelf",  # not a TCP address: left to libp2p
               "/ip4/198.51.100.7/tcp/4001/p2p/QmRelay/p2p-circuit/p2p/QmSelf",  # relayed: left to libp2p
               "/ip4/10.0.0.2/tcp/4001/p2p/QmSelf"]  # a duplicate
    assert encode_addrs(visible).split() == ["/ip4/10.0.0.2/tcp/4001", "/dns4/node.example.org/tcp/4001",
                                             "/ip4/127.0.0.1/tcp/4001", "/ip6/::1/tcp/4001"]
    assert encode_addrs([]) == ""  # client mode: nothing to name


def test_a_publisher_with_many_interfaces_names_what_fits():
    many = [f"/ip4/10.0.{i}.250/tcp/31337" for i in range(40)]
    text = encode_addrs(many)
    assert len(text) <= MAX_CHARS and len(text.split()) == MAX_ADDRS
    assert decode_addrs(text) == text


def test_an_announcement_carries_its_addresses_and_one_without_them_has_no_such_key():
    with_addrs = _ann(addrs="/ip4/10.0.0.2/tcp/31337 /ip4/127.0.0.1/tcp/31337")
    assert decode_announcement(encode_announcement(with_addrs)) == with_addrs
    plain = encode_announcement(_ann())
    assert "addrs" not in msgpack.unpackb(plain) and decode_announcement(plain).addrs == ""


@pytest.mark.parametrize("addrs", [
    7, "/ip4/10.0.0.2/tcp/0", "/ip4/10.0.0.2/tcp/70000", "/ip4/10.0.0.2/udp/4001",
    "/ip4/10.0.0.2/tcp/4001/p2p/QmX", "10.0.0.2:4001", " ".join(["/ip4/10.0.0.2/tcp/1"] * (MAX_ADDRS + 1)),
    "/unix/tmp/p2pd.sock",
])
def test_malformed_addresses_make_the_announcement_malformed(addrs):
    data = msgpack.packb({**msgpack.unpackb(encode_announcement(_ann())), "addrs": addrs})
    with pytest.raises(RecordError) as exc:
        decode_announcement(data)
    assert exc.value.reason == "bad_announcement"


def test_the_inbox_keeps_the_newest_announcements_addresses():
    inbox = Inbox(Limits(max_clock_skew_s=1e9, max_age_s=1e9))
    newer = _ann(created_at=T0 + 20, window=int((T0 + 20) // 10), sha256=sha256_hex(b"b"), addrs="/ip4/10.0.0.3/tcp/2")
    older = _ann(created_at=T0, window=int(T0 // 10), addrs="/ip4/10.0.0.2/tcp/1")
    assert inbox.offer(encode_announcement(newer), PEER, now=T0 + 21)
    assert inbox.offer(encode_announcement(older), PEER, now=T0 + 21)  # a late read of an older one
    assert inbox.addrs_of(PEER) == ["/ip4/10.0.0.3/tcp/2"]
    assert inbox.addrs_of("QmSomeoneElse") == []
