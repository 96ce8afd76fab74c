"""A gossip message under a fresh identity, as bench/exchange/spam.py's `fresh+guard` spammer writes it
(`bench.exchange.spam.fresh_message`), over real p2pd daemons on 127.0.0.1.

A plain p2pd (no pubsub of its own) dials a subscriber's daemon, opens `/meshsub/1.1.0` and writes one RPC per
message, each signed by a new ed25519 key (docs/benchmarks/scale.md §16D2). The subscriber's daemon, verifying strictly,
delivers every well-signed one to its client as sent by that fresh identity — one connection, as many authors as
messages — and drops one whose signature was altered (written first; nothing more may arrive within QUIET_S after
the good ones, as the daemon checks messages concurrently and keeps no order). This is what the bench's
arm relies on: if the frames were malformed or the signature wrong, the daemon would drop them all and the arm would
measure no spam at all."""

from __future__ import annotations

import asyncio

import pytest
from hivemind.p2p import P2P
from hivemind.p2p.p2p_daemon_bindings.datastructures import PeerID

from bench.exchange.spam import MESHSUB, fresh_message
from swarm.net.pubsub import Pubsub, PubsubP2P

pytestmark = pytest.mark.integration
TOPIC = "rlswarm-test-fresh"
GOOD = 3
QUIET_S = 5.0  # after the good ones, nothing more may arrive within this long


async def _daemon(kind: type[P2P]) -> P2P:
    return await kind.create(host_maddrs=["/ip4/127.0.0.1/tcp/0"], dht_mode="client", auto_nat=False,
                             nat_port_map=False, startup_timeout=60)


def _corrupt(frame: bytes) -> bytes:
    """The same frame with the last byte of its signature (the message's final field) flipped."""
    return frame[:-1] + bytes([frame[-1] ^ 0x01])


async def _scenario() -> None:
    subscriber = await _daemon(PubsubP2P)
    writer = await _daemon(P2P)
    try:
        authors: list[str] = []

        def data_of(peer: str) -> bytes:
            authors.append(peer)
            return f"announced by {peer}".encode()

        bad = _corrupt(fresh_message(TOPIC, data_of))  # authors[0]; written first
        good = [fresh_message(TOPIC, data_of) for _ in range(GOOD)]
        async with await Pubsub.of(subscriber).subscribe(TOPIC) as sub:
            sub_id = PeerID.from_base58(str(subscriber.peer_id))
            await writer._client.connect(sub_id, (await subscriber._client.identify())[1])
            _, _, stream = await writer._client.stream_open(sub_id, [MESHSUB])
            stream.write(bad + b"".join(good))
            await stream.drain()
            got = []
            async with asyncio.timeout(120):  # a loaded machine: generous
                async for msg in sub:
                    got.append(msg)
                    if len(got) == GOOD:
                        break
            try:  # the daemon checks messages concurrently: the bad one, if delivered, may come after the good ones
                got.append(await asyncio.wait_for(anext(sub), QUIET_S))
            except TimeoutError:
                pass
            stream.close()
        # the good ones (the daemon checks them concurrently: in any order), each as its own author; not the bad one
        assert sorted(m.sender for m in got) == sorted(authors[1:]), (got, authors)
        assert all(m.data == f"announced by {m.sender}".encode() for m in got)
        assert len(set(authors)) == GOOD + 1 and str(writer.peer_id) not in authors  # fresh, not the connection's
    finally:
        await writer.shutdown()
        await subscriber.shutdown()


def test_a_fresh_identity_per_message_is_delivered_and_a_bad_signature_is_not():
    asyncio.run(_scenario())
