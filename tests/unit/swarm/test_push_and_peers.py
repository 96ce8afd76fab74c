"""Client mode's pieces without a network: a pushed bundle under the receiver's fan-in budget
(Inbox.claim), the push and info frames (swarm.net.wire), peers files and the network flags of
`swarm node` (ops.cli.network), and the swarm config's NAT options."""

from __future__ import annotations

import argparse
import hashlib
from collections import Counter

import pytest

from bench.harness.records import completion, record
from node.config import ConfigError
from ops.cli import network
from protocols.records import RolloutRecord
from swarm.config import SwarmConfig
from swarm.dht.peer import network_options
from swarm.exchange.transport import Inbox, Limits, make_bundle
from swarm.net.wire import (
    FetchError,
    accept_push,
    decline_push,
    decode_header,
    encode_header,
    encode_info,
    push_bundle,
    read_frame,
    read_info,
)
from tests.unit.protocols.test_wire import _frames, _reader, _run, _Writer

T0 = 1_700_000_000.0
BOOT = "/ip4/127.0.0.1/tcp/31337/p2p/QmbootstrapPeerId1"


def _record(peer: str, index: int = 0) -> RolloutRecord:
    return record(peer, index, completions=[completion("5", 2)])


def _bundle(peer: str, index: int = 0, now: float = T0):
    return make_bundle(peer, [_record(peer, index)], now=now)  # (data, value, ann)


def test_a_claimed_push_is_vetted_and_booked_like_a_pull():
    inbox = Inbox(Limits(max_fetches_per_window=2))
    data, value, ann = _bundle("peerA")
    assert inbox.claim(value, "peerA", now=T0 + 1) == ann
    assert inbox.claim(value, "peerA", now=T0 + 1) is None  # the same offer again: seen
    inbox.settle_fetched(ann, data, "rlswarm")
    got = inbox.take(1, 0)
    assert [r.peer for r in got.records] == ["peerA"] and got.drops == Counter()
    assert inbox.choose(T0 + 1) == []  # taken by the push: nothing left to pull


def test_a_push_is_declined_when_the_budget_is_spent_and_counted_as_skipped():
    inbox = Inbox(Limits(max_fetches_per_window=1))
    _, value_b, ann_b = _bundle("peerB")
    assert inbox.offer(value_b, "peerB", now=T0) and inbox.choose(T0) == [ann_b]  # the window's one fetch
    _, value_a, _ = _bundle("peerA", 1)
    assert inbox.claim(value_a, "peerA", now=T0 + 1) is None
    assert inbox.take(0, 0).skipped == 1
    _, later, ann = _bundle("peerA", 2, now=T0 + 11)  # the next window has room again
    assert inbox.claim(later, "peerA", now=T0 + 11) == ann


def test_a_push_in_another_peers_name_or_with_a_bad_digest_is_dropped():
    inbox = Inbox(Limits())
    data, value, ann = _bundle("peerA")
    assert inbox.claim(value, "peerB", now=T0) is None  # the stream's peer signs the offer
    inbox.settle_fetched(ann, data[:-1] + b"x", "rlswarm")
    assert inbox.take(0, 0).drops == Counter({"forged": 1, "digest_mismatch": 1})


def test_push_frames_offer_header_then_data_only_after_ok():
    async def offer(status: str):
        writer = _Writer()
        got = await push_bundle(_reader(_frames(encode_header(status))), writer, b"announcement", b"d" * 10)
        return got, bytes(writer.data)

    status, sent = _run(lambda: offer("ok"))
    assert status == "ok" and sent == _frames(b"announcement", b"d" * 10)
    status, sent = _run(lambda: offer("declined"))
    assert status == "declined" and sent == _frames(b"announcement")


def test_accepting_a_push_checks_size_and_digest_like_a_fetch():
    data = b"bundle bytes"
    sha = hashlib.sha256(data).hexdigest()

    async def accept(stream: bytes):
        writer = _Writer()
        got = await accept_push(_reader(stream), writer, sha256=sha, nbytes=len(data))
        assert decode_header(await read_frame(_reader(bytes(writer.data)), 4096)) == ("ok", len(data), sha)
        return got

    assert _run(lambda: accept(_frames(data))) == data
    with pytest.raises(FetchError, match="size_mismatch"):
        _run(lambda: accept(_frames(data + b"more")))
    with pytest.raises(FetchError, match="digest_mismatch"):
        _run(lambda: accept(_frames(b"bundle bytez")))
    writer = _Writer()
    _run(lambda: decline_push(writer))
    assert decode_header(bytes(writer.data)[4:])[0] == "declined"


def test_info_frame_round_trip_and_garbage():
    assert _run(lambda: read_info(_reader(_frames(encode_info("rlswarm", 12.5))))) == \
        {"v": 2, "swarm": "rlswarm", "time": 12.5}
    with pytest.raises(FetchError, match="bad_info"):
        _run(lambda: read_info(_reader(_frames(b"\x93\x01\x02\x03"))))


def test_peers_file_format():
    text = f"""# a project's peers file
swarm: my-project   # the swarm these peers serve

{BOOT}
/dns4/boot.my-project.org/tcp/31337/p2p/QmOtherPeer  # second bootstrap
"""
    found = network.parse_peers(text, "peers.txt")
    assert found.swarm_id == "my-project"
    assert found.maddrs == [BOOT, "/dns4/boot.my-project.org/tcp/31337/p2p/QmOtherPeer"]
    with pytest.raises(ConfigError, match=r"peers.txt:2: .*neither a multiaddr"):
        network.parse_peers(f"{BOOT}\n/ip4/1.2.3.4/tcp/1\n", "peers.txt")
    with pytest.raises(ConfigError, match="holds no multiaddr"):
        network.parse_peers("# nothing\nswarm: x\n", "peers.txt")


def test_write_peers_file_leaves_out_loopback_and_reads_back(tmp_path):
    path = tmp_path / "peers.txt"
    public = "/dns4/bootstrap/tcp/31337/p2p/QmBoot"
    network.write_peers_file(path, [BOOT, public], swarm_id="s1", note="test")
    assert network.read_peers(str(path)).maddrs == [public]
    assert network.read_peers(str(path)).swarm_id == "s1"
    network.write_peers_file(path, [BOOT])  # only loopback: kept (a local swarm)
    assert network.read_peers(str(path)) == network.PeersFile([BOOT], None)


def _node_args(*argv: str):
    p = argparse.ArgumentParser()
    p.add_argument("--set", action="append")
    network.add_flags(p)
    return p.parse_args(list(argv))


def test_network_flags_become_swarm_overrides(tmp_path):
    peers = tmp_path / "peers.txt"
    peers.write_text(f"swarm: s1\n{BOOT}\n")
    out = network.overrides(_node_args("--initial-peers-file", str(peers), "--identity", "id.key",
                                       "--host-maddrs", "/ip4/0.0.0.0/tcp/31337",
                                       "--announce-maddrs", "/ip4/1.2.3.4/tcp/31337", "--client-mode"))
    assert out == {"swarm.initial_peers": [BOOT], "swarm.swarm_id": "s1", "swarm.identity_path": "id.key",
                   "swarm.host_maddrs": ["/ip4/0.0.0.0/tcp/31337"], "swarm.announce_maddrs": ["/ip4/1.2.3.4/tcp/31337"],
                   "swarm.client_mode": True, "swarm.enabled": True}
    assert network.overrides(_node_args()) == {}
    with pytest.raises(ConfigError, match="serves swarm 's1'"):
        network.overrides(_node_args("--initial-peers-file", str(peers), "--swarm-id", "s2"))
    with pytest.raises(ConfigError, match="serves swarm 's1'"):
        network.overrides(_node_args("--initial-peers-file", str(peers), "--set", "swarm.swarm_id=s2"))


def test_nat_options_reach_hivemind():
    assert network_options(SwarmConfig()) == {"use_relay": True, "use_auto_relay": False}
    client = SwarmConfig(enabled=True, client_mode=True, initial_peers=[BOOT])
    assert network_options(client) == {"use_relay": True, "use_auto_relay": False, "client_mode": True,
                                       "no_listen": True}
    with pytest.raises(ValueError, match="client_mode joins through the initial peers"):
        SwarmConfig(enabled=True, client_mode=True)
    with pytest.raises(ValueError, match="exclude each other"):
        SwarmConfig(client_mode=True, use_auto_relay=True)


def test_a_publisher_that_answered_busy_is_counted_and_not_backed_off():
    """A pull the publisher answered `busy` to every try (docs/PROTOCOL.md §6.1) is dropped as `busy`; the publisher
    is not backed off, so its next announcement is a candidate (a `fetch_failed` backs it off: the control)."""
    for reason, backed_off in (("busy", False), ("fetch_failed", True)):
        inbox = Inbox(Limits(), clock=lambda: T0 + 1)
        _, value, ann = _bundle("peerA", 0, now=T0)
        assert inbox.offer(value, "peerA", now=T0 + 1)
        assert inbox.choose(T0 + 1) == [ann]
        inbox.settle_fetched(ann, None, "rlswarm", reason)
        _, value2, ann2 = _bundle("peerA", 1, now=T0 + 1)
        took = inbox.offer(value2, "peerA", now=T0 + 1)
        got = inbox.take(0, 0)
        assert got.drops[reason] == 1
        assert took is (not backed_off) and (got.drops["backoff"] == 1) is backed_off, (reason, got.drops)
        assert ("peerA" in got.backed_off) is backed_off
