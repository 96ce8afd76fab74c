"""The streams a node answers (docs/PROTOCOL.md §6): bundle pulls, announcement pushes, bundle pushes and info —
each behind its admission (swarm.exchange.admission), so no peer, and no number of identities, can hold a handler.

    bundle   the request is served if we publish that bundle and the requester had it at most once before
             (`declined` otherwise); a stream the admission has no room for is answered `busy` (retry after
             swarm.net.wire.BUSY_RETRY_S), never closed unread
    notify   the announcement is vetted like a DHT value; a new candidate runs the fan-in choice at once
             (never a DHT read: a push costs the swarm nothing)
    push     a bundle offered with its bytes by a peer that cannot be dialled (swarm.exchange.push)
    info     our swarm id, protocol version and clock, for a peer's `swarm doctor`

A mixin of swarm.exchange.hivemind.HivemindTransport: it uses the transport's config, inbox, download slots,
served bundles and fan-in (`_fetch_chosen`).
"""

from __future__ import annotations

import asyncio
import time

from swarm.exchange.admission import StreamGuards
from swarm.exchange.push import receive_push
from swarm.net import wire


class StreamHandlers:
    """The stream handlers of HivemindTransport (module docstring)."""

    async def _add_handlers(self) -> None:
        self._guards = StreamGuards(self.inbox.is_good, max_age_s=self.cfg.max_age_s)
        await self._p2p.add_binary_stream_handler(
            wire.HANDLER_NAME, self.admitted(wire.HANDLER_NAME, self._handle_stream, refuse=wire.answer_busy))
        for name, handler in ((wire.NOTIFY_NAME, self._handle_notify), (wire.PUSH_NAME, self._handle_push),
                              (wire.INFO_NAME, self._handle_info)):
            await self._p2p.add_binary_stream_handler(name, self.admitted(name, handler))

    def admitted(self, protocol: str, handler, is_good=None, refuse=None):
        """`handler` (a stream handler) behind the admission of its libp2p `protocol`: streams beyond the per-peer
        and total bounds are closed before a byte is read, by `refuse(writer)` when given (swarm.exchange.admission;
        extensions: swarm.weights.hivemind, swarm.exchange.score_stream). `is_good`: who is in good standing for it
        (default the exchange's standing)."""
        return self._guards.admitted(protocol, handler, is_good, refuse)

    def served_to(self, requester: str, sha256: str) -> bool:
        """Whether to serve `requester` the bundle `sha256` now (it had it at most once before: swarm.exchange.admission)."""
        return self._guards.served.allow(requester, sha256)

    async def _handle_stream(self, info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requester = info.peer_id.to_base58()
        await wire.serve_stream(reader, writer, self._lookup, self.cfg.fetch_timeout_s, "a bundle stream",
                                allow=lambda sha: self.served_to(requester, sha))

    async def _handle_notify(self, info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            value = await asyncio.wait_for(wire.read_notification(reader), self.cfg.fetch_timeout_s)
        except (asyncio.TimeoutError, ConnectionError, wire.FetchError) as exc:
            self.inbox.drop("bad_announcement" if isinstance(exc, wire.FetchError) else "fetch_failed")
            return
        finally:
            writer.close()
        if self.inbox.offer(value, info.peer_id.to_base58(), now=time.time()):
            self._fetch_chosen()  # the fan-in choice, not a DHT read: a push costs the swarm nothing

    async def _handle_push(self, info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await receive_push(info, reader, writer, inbox=self.inbox, swarm_id=self.cfg.swarm_id,
                           timeout_s=self.cfg.fetch_timeout_s, slots=self._slots)
        self._fetch_chosen()  # an offer from a peer we can dial was left a candidate

    async def _handle_info(self, _info, _reader, writer: asyncio.StreamWriter) -> None:
        """Our swarm id, protocol version and clock, for a peer's `swarm doctor`."""
        try:
            await asyncio.wait_for(wire.write_frame(writer, wire.encode_info(self.cfg.swarm_id, time.time())), 5.0)
        except (asyncio.TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    def refused_streams(self):
        """Streams refused by admission, by "<protocol>:<why>", and bundles declined to repeat requesters."""
        return self._guards.refused()
