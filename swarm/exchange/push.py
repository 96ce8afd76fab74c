"""Bundles of a peer that cannot be dialled (client mode), pushed with their bytes (docs/PROTOCOL.md §6.3).

A client-mode node (swarm.config: `client_mode`) listens on no address, so nobody can open a
stream to it and the pull of §6.1 cannot reach its bundles. It offers each bundle instead, over a
stream it opens itself, to up to `push_peers` peers it has recently seen announce (the reachable
ones: a peer without a listen address does not announce in the DHT):

    publisher → receiver   the announcement (the DHT value of §5), one frame
    receiver  → publisher  header: "ok" (send the bytes now) or "declined"
    publisher → receiver   the bundle's data frames, only after "ok"

The receiver vets the offered announcement with the shared receive rules (swarm.exchange.transport.Inbox:
the stream's authenticated peer is the signer) and takes it only when a download slot frees within
SLOT_WAIT_S (strangers hold at most half of them, one peer at most two: swarm.exchange.admission) and its
fan-in budget, the peer's share of the window and its quota have room (`Inbox.claim`), so a pushed
bundle costs a receiver exactly what a pulled one does, and every drop is counted the same way. An
offer from a peer that names addresses (one we can dial) is declined and left a candidate: it is
fetched when the fan-in choice picks it, so pushing gains a dialable peer nothing. It still pulls peers' bundles over its own
outbound connections, and it does not store announcements in the DHT (nobody could fetch them).
A peer whose offer failed to connect is not offered another bundle for `RETRY_S` seconds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable

from protocols.records import Announcement
from swarm.exchange.admission import DownloadSlots
from swarm.exchange.transport import Inbox
from swarm.net import wire
from swarm.net.dial import DialPolicy, open_stream

log = logging.getLogger(__name__)
RETRY_S = 60.0  # a peer we could not reach is skipped this long


class Pusher:
    """Publisher side: which peers to offer a bundle to, and the offers themselves."""

    def __init__(self, *, push_peers: int, timeout_s: float):
        self.push_peers = push_peers
        self.timeout_s = timeout_s
        self.stats: Counter = Counter()  # receiver status (ok, declined, ...) or "failed" → offers
        self._unreachable: dict[str, float] = {}  # peer → when an offer to it failed

    def targets(self, known_peers: list[str], now: float) -> list[str]:
        """Up to push_peers of the recently active peers, leaving out those that failed within RETRY_S."""
        self._unreachable = {p: t for p, t in self._unreachable.items() if now - t < RETRY_S}
        return [p for p in known_peers if p not in self._unreachable][: self.push_peers]

    async def offer_all(self, p2p, peers: list[str], announcement: bytes, data: bytes,
                        addrs_of: Callable[[str], list[str]] = lambda _peer: [], policy: DialPolicy | None = None
                        ) -> Counter:
        """Offer one bundle to every peer in `peers` at once (each dialled at `addrs_of(peer)` first, as `policy`
        allows: swarm.net.dial); the receivers' answers, counted."""
        results = await asyncio.gather(*(self._offer(p2p, p, addrs_of(p), announcement, data, policy) for p in peers))
        got = Counter(results)
        self.stats.update(got)
        if peers and not got["ok"]:
            log.warning("no peer took our bundle (%s); it reaches nobody this time", dict(got))
        return got

    async def _offer(self, p2p, peer: str, addrs: list[str], announcement: bytes, data: bytes,
                     policy: DialPolicy | None) -> str:
        writer = None
        try:
            async def offer() -> str:
                nonlocal writer
                reader, writer = await open_stream(p2p, peer, wire.PUSH_NAME, addrs, policy)
                return await wire.push_bundle(reader, writer, announcement, data)
            return await asyncio.wait_for(offer(), self.timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # unreachable, or an older peer without the push handler
            self._unreachable[peer] = time.time()
            log.info("offering our bundle to %s failed: %r", peer[:12], exc)
            return "failed"
        finally:
            if writer is not None:
                writer.close()


SLOT_WAIT_S = 5.0  # a pushed bundle waits this long at most for a download slot, then is declined (`busy`)


async def receive_push(info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, inbox: Inbox,
                       swarm_id: str, timeout_s: float, slots: DownloadSlots) -> Announcement | None:
    """Receiver side: vet the offer, take the bytes if a download slot frees within SLOT_WAIT_S and the budget
    has room, file them like a fetched bundle. Returns the announcement taken (None: declined or malformed;
    an offer naming addresses is left as a candidate for the caller to fetch). Never raises on peer data."""
    ann, data, reason = None, None, "fetch_failed"
    peer = info.peer_id.to_base58()
    try:
        try:
            value = await asyncio.wait_for(wire.read_notification(reader), timeout_s)
        except (asyncio.TimeoutError, ConnectionError, wire.FetchError) as exc:
            inbox.drop("bad_announcement" if isinstance(exc, wire.FetchError) else "fetch_failed")
            return None
        async with slots.hold(peer, SLOT_WAIT_S) as got_slot:
            if got_slot:
                ann = inbox.claim(value, peer, now=time.time())
            else:
                inbox.drop("busy")
            if ann is None:
                await asyncio.wait_for(wire.decline_push(writer), timeout_s)
                return None
            data = await asyncio.wait_for(wire.accept_push(reader, writer, sha256=ann.sha256, nbytes=ann.nbytes),
                                          timeout_s)
    except wire.FetchError as exc:
        reason = "digest_mismatch" if exc.reason == "digest_mismatch" else "fetch_failed"
        log.info("pushed bundle of %s: %s", ann.peer[:12] if ann else "?", exc)
    except (asyncio.TimeoutError, ConnectionError) as exc:  # answered ok, then silent: a timeout (§8.1)
        reason = "fetch_timeout" if isinstance(exc, asyncio.TimeoutError) else "fetch_failed"
        log.info("receiving a pushed bundle failed: %r", exc)
    finally:
        writer.close()
    if ann is not None:  # decoding is CPU work: off the loop
        await asyncio.get_running_loop().run_in_executor(None, inbox.settle_fetched, ann, data, swarm_id, reason)
    return ann
