"""Replaying an honest peer's own signed gossip does not cost it its standing (swarm.exchange.gossip_guard), over real
hivemind peers on 127.0.0.1.

Every subscriber receives each gossiped message whole: p2pd hands it the publisher's peer id, data, seqno, topic,
signature and key (hivemind's `PSMessage`, field for field gossipsub's `Message`). So anyone subscribed can write an
honest peer's messages back into the mesh on a raw gossipsub stream (`/meshsub/1.1.0`: varint-framed `RPC`s whose
field 2 carries the messages), and the receiver's daemon accepts each as genuine — the signature is the honest
peer's — unless its own duplicate cache (keyed by publisher + seqno, 120 s) still holds that message id. Here:

  - an honest peer H (gossip on, its own pace) publishes REPLAYED real bundles while a spy daemon, subscribed to the
    topic and connected to H, captures every message as delivered; each carries H's signature, checked here by
    docs/PROTOCOL.md §5's rule;
  - a victim V with gossip on (and the guard at its default) joins afterwards — its daemon never saw those message
    ids, as after the 120 s a daemon remembers them;
  - a replayer, a plain p2pd with no pubsub of its own, dials V, opens `/meshsub/1.1.0` and writes all REPLAYED
    messages in one RPC: more than the old guard's burst of 20 at once.

V's code receives every replayed message (the replay really reached the guard), and H keeps its standing at V: not
banned, V's daemon still connected to it, nothing of it dropped as `banned`, `backoff` or `fetch_failed`, and a
bundle H publishes afterwards reaches V's Inbox by gossip (V polls the DHT only every 30 s and nobody pushes) and
its records arrive. Before the fix the guard counted each message against its signer and banned H here (`banned`
1, and a disconnect)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding
from hivemind.p2p import P2P
from hivemind.p2p.p2p_daemon_bindings.datastructures import PeerID
from hivemind.p2p.p2p_daemon_bindings.utils import read_pbmsg_safe
from hivemind.proto import crypto_pb2
from hivemind.proto import p2pd_pb2 as pb

from bench.harness.attacks import publish_rpc
from swarm.dht.bootstrap import start_bootstrap
from swarm.exchange.hivemind import HivemindTransport
from swarm.net.pubsub import Pubsub, PubsubP2P
from tests.integration.conftest import peer_config
from tests.integration.test_gossip_announcements import _wait_on_topic
from tests.integration.test_hivemind_transport import _record

pytestmark = pytest.mark.integration
GOSSIP = {"gossip": True, "poll_interval_s": 30.0, "notify_peers": 0, "fetch_timeout_s": 10}
MESHSUB = "/meshsub/1.1.0"
REPLAYED = 24  # more than the allowance the old guard gave a signer at once (20)
LATER_ROUND = 1000  # the round of the bundle H publishes after the replay


def _signature_checks_out(msg: pb.PSMessage) -> bool:
    """docs/PROTOCOL.md §5's signature rule: the publisher's RSA key (the message's `key`, a libp2p PublicKey) signs
    "libp2p-pubsub:" + the message's protobuf encoding without `signature` and `key` (PKCS#1 v1.5, SHA-256)."""
    public = crypto_pb2.PublicKey()
    public.ParseFromString(msg.key)
    assert public.key_type == crypto_pb2.RSA
    unsigned = pb.PSMessage()
    unsigned.CopyFrom(msg)
    unsigned.ClearField("signature")
    unsigned.ClearField("key")
    serialization.load_der_public_key(public.data).verify(
        msg.signature, b"libp2p-pubsub:" + unsigned.SerializeToString(), padding.PKCS1v15(), hashes.SHA256())
    return True


async def _until(what: str, check, timeout_s: float = 30.0, every_s: float = 0.2) -> None:
    """Wait until `check()` (a blocking call, run in a thread) holds, at most `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(check):
        assert time.monotonic() < deadline, f"not within {timeout_s:.0f} s: {what}"
        await asyncio.sleep(every_s)


async def _daemon(kind: type[P2P]) -> P2P:
    return await kind.create(host_maddrs=["/ip4/127.0.0.1/tcp/0"], dht_mode="client", auto_nat=False,
                             nat_port_map=False, startup_timeout=60)


def _connected(peer: HivemindTransport) -> set[str]:
    return {p.peer_id.to_base58() for p in peer.run_on_loop(peer.p2p.list_peers(), 10)}


def _on_loop(peer: HivemindTransport, read):
    """`read()` on the transport's loop: between two messages its subscription handles, never within one."""
    async def run():
        return read()

    return peer.run_on_loop(run(), 10)


def _maddrs(peer: HivemindTransport):
    return peer.run_on_loop(peer.p2p._client.identify(), 10)[1]


async def _capture(honest: HivemindTransport, daemons: list[P2P]) -> list[pb.PSMessage]:
    """H's gossip of REPLAYED bundles, whole, as a subscriber's daemon delivers it."""
    spy = await _daemon(PubsubP2P)
    daemons.append(spy)
    await spy._client.connect(PeerID.from_base58(honest.peer_id), await asyncio.to_thread(_maddrs, honest))
    spy_ps = Pubsub.of(spy)
    reader, writer, _ = await spy_ps._open(pb.PSRequest(type=pb.PSRequest.SUBSCRIBE, topic=honest.gossip.topic))
    captured: list[pb.PSMessage] = []

    async def capture() -> None:
        while True:
            msg = pb.PSMessage()
            await read_pbmsg_safe(reader, msg)
            if PeerID(getattr(msg, "from")).to_base58() == honest.peer_id:
                captured.append(msg)

    capturing = asyncio.create_task(capture())
    try:
        spy_id = str(spy.peer_id)
        await _until("H's daemon sees the spy subscribed",
                     lambda: spy_id in honest.run_on_loop(honest.gossip.peers(), 10))
        deadline = time.monotonic() + 30
        while honest.peer_id not in await spy_ps.peers(honest.gossip.topic):  # both ways: H's stream to the spy too
            assert time.monotonic() < deadline, "the spy's daemon never saw H subscribe"
            await asyncio.sleep(0.2)
        for i in range(2 * REPLAYED):  # H's own gossip, at its own pace (10 at once, then one every 2 s)
            if len(captured) >= REPLAYED:
                break
            await asyncio.to_thread(honest.publish, [_record(honest.peer_id, i)])
            await _until(f"H gossips its announcement {i}", lambda i=i: honest.gossip.published > i)
        await _until(f"the spy captures {REPLAYED} of H's messages", lambda: len(captured) >= REPLAYED)
    finally:
        capturing.cancel()
        writer.close()
    return captured[:REPLAYED]


async def _replay_scenario(boot_maddrs: list[str], peers: list[HivemindTransport]) -> None:
    honest = await asyncio.to_thread(HivemindTransport, cfg=peer_config(boot_maddrs, **GOSSIP))
    peers.append(honest)
    daemons: list[P2P] = []
    try:
        captured = await _capture(honest, daemons)
        assert all(_signature_checks_out(m) for m in captured)  # whole: the publisher's signature and key included
        assert all(len(m.seqno) == 8 for m in captured) and len({m.seqno for m in captured}) == REPLAYED

        victim = await asyncio.to_thread(HivemindTransport, cfg=peer_config(boot_maddrs, **GOSSIP))
        peers.append(victim)
        await asyncio.to_thread(_wait_on_topic, honest, victim)
        await asyncio.to_thread(_wait_on_topic, victim, honest)
        assert honest.peer_id in await asyncio.to_thread(_connected, victim)
        before = victim.gossip.received

        replayer = await _daemon(P2P)  # no pubsub of its own: a raw gossipsub stream is all it takes
        daemons.append(replayer)
        victim_id = PeerID.from_base58(victim.peer_id)
        await replayer._client.connect(victim_id, await asyncio.to_thread(_maddrs, victim))
        _, _, stream = await replayer._client.stream_open(victim_id, [MESHSUB])
        stream.write(publish_rpc([m.SerializeToString() for m in captured]))
        await stream.drain()
        await _until(f"V's code receives the {REPLAYED} replayed messages",
                     lambda: victim.gossip.received - before >= REPLAYED)
        stream.close()

        guard = victim.gossip.guard
        assert not guard.is_banned(honest.peer_id) and guard.banned == 0, guard.banned_peers()
        offered = await asyncio.to_thread(_on_loop, victim, lambda: victim.gossip.offered)
        await asyncio.to_thread(honest.publish, [_record(honest.peer_id, LATER_ROUND)])
        await _until("V's Inbox takes H's later announcement from gossip", lambda: victim.gossip.offered > offered)
        rounds: set[int] = set()
        drops: Counter = Counter()

        def later_delivered() -> bool:
            took = victim.take(min_records=1, timeout=1.0)
            rounds.update(r.round for r in took.records)
            drops.update(took.drops)
            return LATER_ROUND in rounds

        # V also fetches the bundles the replay announced to it (H's real ones, 2 streams at a time): generous
        await _until("H's later bundle reaches V", later_delivered, timeout_s=180.0, every_s=0.0)
        assert drops["banned"] == 0 and drops["backoff"] == 0 and drops["fetch_failed"] == 0, drops
        assert guard.banned == 0 and not guard.is_banned(honest.peer_id)
        assert honest.peer_id in await asyncio.to_thread(_connected, victim)
        print(f"\nreplayed {REPLAYED} of H's signed messages to V: V received {victim.gossip.received - before}, "
              f"banned {guard.banned}, drops {dict(drops)}, H's bundles V took {len(rounds)}")
    finally:
        for daemon in daemons:
            await daemon.shutdown()


def test_replaying_an_honest_peers_signed_gossip_does_not_cost_it_its_standing():
    boot, maddrs = start_bootstrap(startup_timeout_s=60)
    peers: list[HivemindTransport] = []
    try:
        asyncio.run(_replay_scenario(maddrs[:1], peers))
    finally:
        for p in peers:
            p.shutdown()
        boot.shutdown()
