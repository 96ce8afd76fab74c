"""Opening a stream to a peer by id, with the addresses it announced (protocols.addrs) as the first way there.

hivemind's `call_binary_stream_handler(peer_id, …)` leaves finding the peer to p2pd's libp2p
Kademlia DHT, which knows no address for a loopback-only node that joined through a bootstrap
reached over another interface, and admits no peer at all on hosts whose addresses libp2p deems
neither private nor public (protocols.addrs). So when the peer named addresses in its signed
announcement, we connect to them first (a no-op while a connection is open), then open the
stream; libp2p's routing stays the fallback (a relayed peer, an announcement without addresses).

Those addresses are the peer's claim, so a receiver does not dial whatever it is told (DialPolicy):
only addresses of the scopes its own network makes useful (protocols.addrs.dialable_scopes: never a
link-local or a reserved one, loopback only from a loopback-only node), an address whose connect
failed waits RETRY_S (doubling per further failure, at most RETRY_MAX_S) before it is dialled again
for any peer, an address being dialled is not dialled again meanwhile (its connect is waited for),
and addresses never connected to before are dialled at most RATE_PER_S a second (bursts of BURST).
What is not dialled is left to libp2p's routing; every decision is counted.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Sequence

from hivemind.p2p import PeerID
from hivemind.p2p.p2p_daemon_bindings.utils import (
    raise_if_failed,
    read_pbmsg_safe,
    write_pbmsg,
)
from hivemind.proto import p2pd_pb2 as p2pd_pb
from hivemind.utils.multiaddr import Multiaddr

from protocols.addrs import dialable_scopes, scope_of
from swarm.bucket import TokenBucket

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


RETRY_S = 10.0  # an address whose connect failed is not dialled again for this long (doubling per failure)
RETRY_MAX_S = 300.0
RATE_PER_S = 2.0  # connects to addresses never connected to before, per second (token bucket)
BURST = 8.0
KNOWN_S = 600.0  # an address connected to within this long costs no token
MAX_TARGETS = 4096  # addresses remembered (the oldest forgotten first)


class DialPolicy:
    """Which announced addresses to dial now (module docstring). Runs on the transport's event loop."""

    def __init__(self, own_addrs: Iterable[str], network: Iterable[str] = (), clock: Callable[[], float] = time.monotonic):
        self.scopes = dialable_scopes(own_addrs, network)
        self.clock = clock
        self.stats: Counter = Counter()  # dialled / scope / waiting / rate: addresses, by what was decided
        self._targets: OrderedDict[str, tuple[float, int, float]] = OrderedDict()  # addr → (wait until, failures, ok at)
        self._inflight: dict[str, asyncio.Future] = {}  # addr → the outcome of the connect to it in flight
        self._new = TokenBucket(RATE_PER_S, BURST, clock())  # connects to addresses not known good

    def pick(self, addrs: Sequence[str]) -> tuple[list[str], list[asyncio.Future]]:
        """(the addresses of `addrs` to connect to now — maybe none: libp2p's routing is then the way —, the
        connects to others of them already in flight, to wait for instead of dialling them again)."""
        now = self.clock()
        out, joined = [], []
        for addr in addrs:
            until, failures, ok_at = self._targets.get(addr, (0.0, 0, -math.inf))
            if scope_of(addr) not in self.scopes:
                self.stats["scope"] += 1
            elif addr in self._inflight:  # concurrent fetches of one peer, or many peers naming one address
                self.stats["joined"] += 1
                joined.append(self._inflight[addr])
            elif now < until:
                self.stats["waiting"] += 1
            elif now - ok_at > KNOWN_S and not self._new.take(1.0, now):
                self.stats["rate"] += 1
            else:
                self.stats["dialled"] += 1
                out.append(addr)
                try:
                    self._inflight[addr] = asyncio.get_running_loop().create_future()
                except RuntimeError:  # no loop (a synchronous caller): nothing can join
                    pass
        return out, joined

    def outcome(self, addrs: Sequence[str], ok: bool) -> None:
        """A connect to `addrs` succeeded (they are known good) or failed (each waits, longer each time)."""
        now = self.clock()
        for addr in addrs:
            _, failures, ok_at = self._targets.pop(addr, (0.0, 0, -math.inf))
            if ok:
                self._targets[addr] = (0.0, 0, now)
            else:
                self._targets[addr] = (now + min(RETRY_MAX_S, RETRY_S * 2.0 ** failures), failures + 1, ok_at)
            fut = self._inflight.pop(addr, None)
            if fut is not None and not fut.done():
                fut.set_result(ok)
        while len(self._targets) > MAX_TARGETS:
            self._targets.popitem(last=False)


async def connect(p2p, peer: str, addrs: Sequence[str] = (), policy: DialPolicy | None = None) -> tuple[bool, str]:
    """Connect to `peer` at the first of `addrs` that answers (with a `policy`, only those it picks; a connect of
    them already in flight is waited for instead). (connected, the last error) — (False, "") when nothing was
    dialled. The caller bounds it with a timeout."""
    pid = PeerID.from_base58(peer)
    connect_error = ""
    if policy is not None:
        addrs, joined = policy.pick(addrs)
        if joined and not addrs:  # another call is dialling these right now: its connection serves us too
            await asyncio.wait([asyncio.shield(f) for f in joined])
    for addr in addrs:  # one at a time, so that each address's own outcome is known (DialPolicy)
        try:
            # p2pd's control `connect`: dials the address (and adds it to its peerstore for a while)
            await _control(p2p._client.control, p2pd_pb.Request(type=p2pd_pb.Request.CONNECT, connect=p2pd_pb.ConnectRequest(
                peer=pid.to_bytes(), addrs=[Multiaddr(addr).to_bytes()])))
        except asyncio.CancelledError:
            if policy is not None:  # a dial that outlived its caller's timeout counts as failed
                policy.outcome([addr], ok=False)
            raise
        except Exception as exc:  # ControlFailure (refused, wrong peer at that address), a malformed address
            if policy is not None:
                policy.outcome([addr], ok=False)
            connect_error = _short(exc)
            log.info("connecting to %s at %s failed: %s", peer[:12], addr, connect_error)
            continue
        if policy is not None:
            policy.outcome([addr], ok=True)
        return True, ""
    return False, connect_error


async def open_stream(p2p, peer: str, protocol: str, addrs: Sequence[str] = (), policy: DialPolicy | None = None
                      ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """(reader, writer) of a new `protocol` stream to `peer`; Unreachable when it cannot be reached. With a
    `policy`, only the addresses it picks are dialled. The caller bounds it with a timeout and closes the writer."""
    pid = PeerID.from_base58(peer)
    _, connect_error = await connect(p2p, peer, addrs, policy)
    if connect_error:
        log.info("no announced address of %s answered; trying libp2p's routing", peer[:12])
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
