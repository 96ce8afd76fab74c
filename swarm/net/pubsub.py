"""Gossipsub through hivemind's p2pd: a thin asyncio client for the daemon's pubsub control requests.

The p2pd that hivemind ships is go-libp2p-daemon built with go-libp2p-pubsub, and hivemind's
`p2pd.proto` already defines the requests (`Request.PUBSUB` carrying a `PSRequest`: GET_TOPICS,
LIST_PEERS, PUBLISH, SUBSCRIBE; answers `PSResponse`; delivered messages `PSMessage`). What hivemind
lacks is the Python side: its control client (`hivemind.p2p.p2p_daemon_bindings`) has no pubsub calls,
and `hivemind.P2P.create` takes a fixed list of arguments and forwards no other daemon flag, so it
cannot start p2pd with pubsub on. This module adds both, beside hivemind's client:

  PubsubP2P      a `hivemind.P2P` whose daemon runs with `-pubsub=1 -pubsubRouter=gossipsub`: it overrides
                 `_make_process_args`, the one place `P2P.create` builds the daemon's command line. Message
                 signing stays p2pd's default (on, strict verification); every other argument is P2P.create's.
                 A DHT peer's daemon is started by hivemind inside the DHT process (`DHTNode.create` calls
                 `hivemind.dht.node.P2P.create`), so pubsub there needs that name bound to PubsubP2P in
                 that process before it starts.
  Pubsub         the client: `publish(topic, data)`, `subscribe(topic)` → a Subscription, `topics()` (those
                 this daemon subscribes to), `peers(topic)` (the peers it knows subscribe to `topic`;
                 without a topic: every peer of its pubsub).
  Subscription   an async iterator of GossipMessage; `close()` (or leaving `async with`) ends it.
  GossipMessage  one delivered message: sender (base58 peer id), data, seqno, topics.

From hivemind it uses `DaemonConnector` (a connection to the daemon's control socket, the one a
P2P's client uses), the varint-delimited protobuf framing (`write_pbmsg`, `read_pbmsg_safe`,
`read_unsigned_varint`), `PeerID` and the generated `p2pd_pb2` messages. Every request runs on its
own control connection, as hivemind's `identify` and `list_peers` do. A subscription keeps its
connection: the daemon writes each message of the topic to it as one frame, and closing the
connection cancels the subscription in the daemon. What it adds on top of the framing: a cap on the
frame length (`max_frame`) — a longer frame is read through in 64 KiB pieces and skipped
(`Subscription.oversize`), never held whole — and malformed frames skipped (`Subscription.malformed`).

What the daemon checks for us and what it does not (p2pd's pubsub options, measured over three real
daemons by tests/integration/test_pubsub.py):
- every message is signed with its publisher's libp2p key and carries its peer id, and a daemon with
  strict verification (p2pd's default) drops a message whose signature is missing or fails before it
  relays or delivers it; so `GossipMessage.sender` is authenticated by our own daemon, and since
  our libp2p key is the RSA key that signs our DHT announcements (swarm.net.identity), the sender
  of a gossiped announcement is bound to its publisher as a DHT subkey's owner is;
- the control protocol offers no validator hook (no request registers one) and p2pd turns on no
  peer scoring: the daemon relays every well-signed message of a topic it subscribes to before our
  code sees it, so what an announcement must satisfy beyond that signature (its `peer` field, size,
  age, swarm id) is checked after receipt and cannot stop the relaying;
- go-libp2p-pubsub's own limit on one message (1 MiB by default) is the only size limit in the daemon:
  a longer message is accepted by the publishing daemon without an error and delivered to nobody;
  anything shorter reaches our Subscription, which skips frames over `max_frame`;
- the daemon reports who published a message, not which neighbour forwarded it to us;
- every subscriber receives each message whole (publisher, data, seqno, topic, signature, key: `PSMessage`, field
  for field gossipsub's `Message`), so anyone can write a peer's messages back into the mesh on a raw gossipsub
  stream (`/meshsub/1.1.0`), and the daemon accepts them as that peer's: it drops only a message whose id
  (publisher + seqno) is still in its duplicate cache (go-libp2p-pubsub's default 120 s; a review saw replays
  accepted again 185 s later). A signed message proves who signed its data, never when or through whom it
  arrives (tests/integration/test_gossip_replay.py; what we do about it: swarm.exchange.gossip_guard);
- one publisher's messages are not kept in order (a long one can arrive after a short one sent later).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Self

from google.protobuf.message import DecodeError
from hivemind.p2p import P2P
from hivemind.p2p.p2p_daemon_bindings.control import DaemonConnector
from hivemind.p2p.p2p_daemon_bindings.datastructures import PeerID
from hivemind.p2p.p2p_daemon_bindings.utils import (
    read_pbmsg_safe,
    read_unsigned_varint,
    write_pbmsg,
)
from hivemind.proto import p2pd_pb2 as pb
from hivemind.utils.multiaddr import Multiaddr

DAEMON_FLAGS = {"pubsub": True, "pubsubRouter": "gossipsub"}  # p2pd's flags for gossipsub (signing: its default)
MAX_FRAME = 64 * 1024  # longest delivered message a Subscription reads; an announcement is ≤ 1 KiB
_SKIP_PIECE = 64 * 1024  # an oversized frame is read through in pieces of this size


class PubsubError(RuntimeError):
    """The daemon refused a pubsub request (pubsub not enabled, a malformed request, a failed publish)."""


@dataclass(frozen=True)
class GossipMessage:
    """One message the daemon delivered on a subscription."""

    sender: str  # base58 peer id of the publisher, whose signature the daemon verified ("" if none)
    data: bytes
    seqno: bytes
    topics: tuple[str, ...]


class PubsubP2P(P2P):
    """hivemind.P2P with gossipsub on in its p2pd (`await PubsubP2P.create(...)`, P2P.create's arguments)."""

    @staticmethod
    def _make_process_args(*args, **kwargs) -> list[str]:
        return P2P._make_process_args(*args, **{**kwargs, **DAEMON_FLAGS})


def _peer(raw: bytes) -> str:
    return PeerID(raw).to_base58() if raw else ""


class Subscription:
    """Messages of one topic as the daemon delivers them: `async for msg in sub`; ends when closed."""

    def __init__(self, topic: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_frame: int):
        self.topic = topic
        self.max_frame = max_frame
        self.oversize = 0  # frames longer than max_frame, skipped
        self.malformed = 0  # frames that did not parse as a PSMessage, skipped
        self._reader = reader
        self._writer = writer

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> GossipMessage:
        while True:
            try:
                size = await read_unsigned_varint(self._reader)
                if size > self.max_frame:
                    while size > 0:
                        piece = min(size, _SKIP_PIECE)
                        await self._reader.readexactly(piece)
                        size -= piece
                    self.oversize += 1
                    continue
                raw = await self._reader.readexactly(size)
            except (asyncio.IncompleteReadError, ConnectionError, ValueError):  # closed (by us or the daemon)
                raise StopAsyncIteration from None
            msg = pb.PSMessage()
            try:
                msg.ParseFromString(raw)
                sender = _peer(getattr(msg, "from"))
            except (DecodeError, ValueError):
                self.malformed += 1
                continue
            return GossipMessage(sender=sender, data=msg.data, seqno=msg.seqno, topics=tuple(msg.topicIDs))

    async def close(self) -> None:
        """End the subscription: the daemon cancels it when its connection closes."""
        self._writer.close()
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


class Pubsub:
    """Pubsub requests to one p2pd over its control socket (`Pubsub.of(p2p)` for a running hivemind.P2P)."""

    def __init__(self, control_maddr: Multiaddr | str, *, max_frame: int = MAX_FRAME):
        self._connector = DaemonConnector(Multiaddr(str(control_maddr)))
        self.max_frame = max_frame

    @classmethod
    def of(cls, p2p: P2P, **kwargs) -> Pubsub:
        """The client for the daemon `p2p` (or a replica of it) talks to."""
        return cls(p2p._daemon_listen_maddr, **kwargs)

    async def _open(self, request: pb.PSRequest) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, pb.Response]:
        reader, writer = await self._connector.open_connection()
        try:
            await write_pbmsg(writer, pb.Request(type=pb.Request.PUBSUB, pubsub=request))
            response = pb.Response()
            await read_pbmsg_safe(reader, response)
        except BaseException:
            writer.close()
            raise
        if response.type == pb.Response.ERROR:
            writer.close()
            raise PubsubError(response.error.msg)
        return reader, writer, response

    async def _ask(self, request: pb.PSRequest) -> pb.Response:
        _, writer, response = await self._open(request)
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
        return response

    async def publish(self, topic: str, data: bytes) -> None:
        """Publish `data` on `topic` (the daemon signs it and sends it to the topic's peers it knows)."""
        await self._ask(pb.PSRequest(type=pb.PSRequest.PUBLISH, topic=topic, data=data))

    async def subscribe(self, topic: str) -> Subscription:
        """Subscribe to `topic`; messages published from now on arrive on the returned Subscription."""
        reader, writer, _ = await self._open(pb.PSRequest(type=pb.PSRequest.SUBSCRIBE, topic=topic))
        return Subscription(topic, reader, writer, self.max_frame)

    async def topics(self) -> list[str]:
        """The topics this daemon subscribes to."""
        response = await self._ask(pb.PSRequest(type=pb.PSRequest.GET_TOPICS))
        return list(response.pubsub.topics)

    async def peers(self, topic: str = "") -> list[str]:
        """Peers (base58) this daemon knows subscribe to `topic`; "" for every peer of its pubsub."""
        response = await self._ask(pb.PSRequest(type=pb.PSRequest.LIST_PEERS, topic=topic))
        return [_peer(raw) for raw in response.pubsub.peerIDs]
