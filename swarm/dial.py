"""Opening a stream to a peer by id, with the addresses it announced (protocols.addrs) as the first way there.

hivemind's `call_binary_stream_handler(peer_id, …)` leaves finding the peer to p2pd's libp2p
Kademlia DHT, which knows no address for a loopback-only node that joined through a bootstrap
reached over another interface, and admits no peer at all on hosts whose addresses libp2p deems
neither private nor public (protocols.addrs). So when the peer named addresses in its signed
announcement, we connect to them first (a no-op while a connection is open), then open the
stream; libp2p's routing stays the fallback (a relayed peer, an announcement without addresses).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence

from hivemind.p2p import PeerID
from hivemind.p2p.p2p_daemon_bindings.utils import raise_if_failed, read_pbmsg_safe, write_pbmsg
from hivemind.proto import p2pd_pb2 as p2pd_pb
from hivemind.utils.multiaddr import Multiaddr

log = logging.getLogger(__name__)


class Unreachable(ConnectionError):
    """Neither the announced addresses nor libp2p's routing reached the peer (message: both errors, one line)."""


def _short(exc: BaseException) -> str:
    text = (str(exc).splitlines() or [""])[0].strip()
    return (text or type(exc).__name__)[:160]


async def _control(client, request, keep: bool = False) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """One request on a new connection to p2pd's control socket; the connection is closed unless the request
    succeeded and `keep` (a stream open: the connection is the stream). hivemind's own `stream_open` and
    `connect` leave it open when the request fails or is cancelled (a dial that fails or times out): the
    StreamWriter, collected later by whatever thread runs the GC, then printed "Exception ignored in
    StreamWriter.__del__" with a traceback into the node's log."""
    reader, writer = await client.daemon_connector.open_connection()
    try:
        await write_pbmsg(writer, request)
        response = p2pd_pb.Response()
        await read_pbmsg_safe(reader, response)
        raise_if_failed(response)
    except BaseException:
        writer.close()
        raise
    if not keep:
        writer.close()
    return reader, writer


async def open_stream(p2p, peer: str, protocol: str, addrs: Sequence[str] = ()
                      ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """(reader, writer) of a new `protocol` stream to `peer`; Unreachable when it cannot be reached.
    The caller bounds it with a timeout and closes the writer."""
    pid = PeerID.from_base58(peer)
    connect_error = ""
    if addrs:
        try:
            # p2pd's control `connect`: dials these addresses (and adds them to its peerstore for a while)
            await _control(p2p._client.control, p2pd_pb.Request(type=p2pd_pb.Request.CONNECT, connect=p2pd_pb.ConnectRequest(
                peer=pid.to_bytes(), addrs=[Multiaddr(a).to_bytes() for a in addrs])))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # ControlFailure (refused, wrong peer at that address), a malformed address
            connect_error = _short(exc)
            log.info("connecting to %s at %s failed: %s; trying libp2p's routing", peer[:12], " ".join(addrs),
                     connect_error)
    try:
        reader, writer = await _control(p2p._client.control, p2pd_pb.Request(
            type=p2pd_pb.Request.STREAM_OPEN, streamOpen=p2pd_pb.StreamOpenRequest(peer=pid.to_bytes(), proto=[protocol])),
            keep=True)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        where = f"at {' '.join(addrs)}: {connect_error}; by libp2p routing" if connect_error else \
            ("by libp2p routing (it announced no address)" if not addrs else "after connecting")
        raise Unreachable(f"cannot open {protocol} to {peer[:12]}… {where}: {_short(exc)}") from None
    return reader, writer


class FetchErrors:
    """Why the last fetch from each peer failed, for the newest `max_peers` peers (`swarm doctor` reports
    them); a successful fetch clears the peer. Thread-safe."""

    def __init__(self, max_peers: int = 256):
        self.max_peers = max_peers
        self._last: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def failed(self, peer: str, why: str) -> None:
        with self._lock:
            self._last.pop(peer, None)
            self._last[peer] = why[:240]
            while len(self._last) > self.max_peers:
                self._last.popitem(last=False)

    def succeeded(self, peer: str) -> None:
        with self._lock:
            self._last.pop(peer, None)

    def snapshot(self) -> dict[str, str]:
        with self._lock:
            return dict(self._last)
