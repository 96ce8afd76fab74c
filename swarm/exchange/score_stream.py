"""The score stream: a student's score request to a named teacher and the teacher's answer (docs/PROTOCOL.md §11),
over hivemind or over the in-memory twin. What a request means and how it is scored is node.distill's; this
module moves bytes and bounds them.

    stream   SCORE_NAME; the student writes one request frame (≤ max_bytes), the teacher answers one header
             frame (swarm.net.wire's bundle header: status, nbytes, sha256) and, when the status is `ok`,
             the response bytes as data frames, each prefix checked before its read and the digest at the end
             (swarm.net.wire.fetch_bundle's rules). A refused request is a header with the reason as
             its status and no data: refusals are answered at once, never queued.
    serve    the stream is admitted like every handler, in a pool of its own protocol (swarm.exchange.admission: per
             peer, in total, half for strangers — the peers `students` names count as in good standing here);
             `answer(requester, request)` runs in one worker thread, so forward passes run one at a
             time and the requests waiting for it are at most the handler's admitted streams; the whole
             exchange is bounded by `timeout_s`
    ask      returns a concurrent Future at once: the response bytes, or ScoreFailed with the reason; requests to
             one teacher take turns on one stream at a time (its admission takes at most two of a peer's at once)
             (`refused:<status>`, `timeout`, `unreachable`, or a wire reason such as `size_mismatch`)

The requester is the stream's remote peer id, which libp2p's secure channel authenticates; the response is
attributed to the teacher whose stream carried it. Nothing else is signed.

  ScoreLink          what both links answer; a transport opens its own (Transport.open_score_link)
  HivemindScoreLink  on a started swarm.exchange.hivemind.HivemindTransport (its p2p, loop, admission, dialling)
  MemoryScoreLink    the in-memory twin: `ask` calls the teacher's `answer` in the caller's thread (the benches
                     run nodes in turns, so an answer is there when the round looks for it)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import logging
from collections.abc import Callable, Collection
from typing import Protocol

from swarm.net import wire

log = logging.getLogger(__name__)
SCORE_NAME = "/rlswarm/score/1"  # libp2p protocol id of the score stream
Answer = Callable[[str, bytes], "tuple[str, bytes]"]  # (requester, request bytes) → (status, response bytes)


class ScoreLink(Protocol):
    """The score stream as a node sees it (module docstring), on whichever transport opened it."""

    @property
    def peer_id(self) -> str: ...

    def serve(self, answer: Answer, students: Collection[str] = ()) -> None: ...

    def ask(self, peer: str, request: bytes) -> concurrent.futures.Future: ...

    def close(self) -> None: ...


class ScoreFailed(Exception):
    """A score request that brought no usable answer; `reason` is the student's drop-counter label."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def _done(result: bytes | None = None, exc: BaseException | None = None) -> concurrent.futures.Future:
    fut: concurrent.futures.Future = concurrent.futures.Future()
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)
    return fut


class HivemindScoreLink:
    """The score stream on a started HivemindTransport (module docstring)."""

    def __init__(self, transport, *, max_bytes: int, timeout_s: float):
        self.transport, self.max_bytes, self.timeout_s = transport, max_bytes, timeout_s
        self._worker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="score")
        self._answer: Answer | None = None
        self._turns: dict[str, asyncio.Lock] = {}  # teacher → its turn (used on the transport's loop only)

    @property
    def peer_id(self) -> str:
        return self.transport.peer_id

    def serve(self, answer: Answer, students: Collection[str] = ()) -> None:
        """Answer score requests with `answer` from now on; `students` (peer ids) are admitted as peers in good
        standing on this stream, so strangers' streams never take their slots."""
        self._answer = answer
        standing = self.transport.inbox.is_good
        known = frozenset(students)
        self.transport.run_on_loop(self.transport.p2p.add_binary_stream_handler(
            SCORE_NAME, self.transport.admitted(SCORE_NAME, self._handle, lambda p: p in known or standing(p))),
            self.transport.cfg.startup_timeout_s)

    async def _handle(self, info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requester = info.peer_id.to_base58()
        try:
            await asyncio.wait_for(self._serve_one(requester, reader, writer), self.timeout_s)
        except (TimeoutError, ConnectionError, wire.FetchError) as exc:
            log.info("serving a score request failed: %r", exc)
        finally:
            writer.close()

    async def _serve_one(self, requester: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await wire.read_frame(reader, self.max_bytes, "bad_request")
        except wire.FetchError as exc:
            await wire.write_frame(writer, wire.encode_header(exc.reason))
            return
        loop = asyncio.get_running_loop()
        status, response = await loop.run_in_executor(self._worker, self._answer, requester, request)
        if status != "ok":
            await wire.write_frame(writer, wire.encode_header(status))
            return
        await wire.write_frame(writer, wire.encode_header("ok", len(response), hashlib.sha256(response).hexdigest()))
        await wire.write_data(writer, response)

    def ask(self, peer: str, request: bytes) -> concurrent.futures.Future:
        """Send `request` to `peer`; the Future holds the response bytes or raises ScoreFailed."""
        try:
            return self.transport.submit(self._ask(peer, request))
        except Exception as exc:  # the transport stopped
            return _done(exc=ScoreFailed("unreachable", repr(exc)[:200]))

    async def _ask(self, peer: str, request: bytes) -> bytes:
        try:
            return await asyncio.wait_for(self._one_at_a_time(peer, request), self.timeout_s)
        except TimeoutError as exc:
            raise ScoreFailed("timeout", f"no answer within {self.timeout_s:g} s") from exc
        except wire.FetchError as exc:
            raise ScoreFailed(exc.reason, str(exc)) from exc
        except ScoreFailed:
            raise
        except Exception as exc:  # dial failures, a reset stream: the teacher cannot be reached now
            raise ScoreFailed("unreachable", repr(exc)[:200]) from exc

    async def _one_at_a_time(self, peer: str, request: bytes) -> bytes:
        """One stream to a teacher at a time: its admission takes few streams from one peer at once, and it
        scores one request at a time anyway."""
        if peer not in self._turns:
            while len(self._turns) >= 64:  # forget the oldest teacher's turn (no stream waits on it after its round)
                self._turns.pop(next(iter(self._turns)))
            self._turns[peer] = asyncio.Lock()
        async with self._turns[peer]:
            return await self._exchange(peer, request)

    async def _exchange(self, peer: str, request: bytes) -> bytes:
        reader, writer = await self.transport.open_stream(peer, SCORE_NAME)
        try:
            await wire.write_frame(writer, request)
            status, nbytes, sha = wire.decode_header(await wire.read_frame(reader, wire.MAX_CONTROL, "bad_header"))
            if status != "ok":
                raise ScoreFailed(f"refused:{status[:32]}")
            if not 0 < nbytes <= self.max_bytes:
                raise ScoreFailed("too_large", f"an answer of {nbytes} bytes (limit {self.max_bytes})")
            return await wire.read_data(reader, sha256=sha, nbytes=nbytes)
        finally:
            writer.close()

    def close(self) -> None:
        if self._answer is not None:
            try:
                self.transport.run_on_loop(self.transport.p2p.remove_binary_stream_handler(SCORE_NAME), 5.0)
            except Exception:  # the transport may be shutting down already
                pass
        self._worker.shutdown(wait=False, cancel_futures=True)


_ANSWERS: dict[object, dict[str, Answer]] = {}  # in-memory hub → peer → its answer


class MemoryScoreLink:
    """The score stream of the in-memory twin (swarm.exchange.twin): the same bytes and the same sizes checked."""

    def __init__(self, transport, *, max_bytes: int, timeout_s: float = 0.0):
        self.transport, self.max_bytes = transport, max_bytes
        self._answers = _ANSWERS.setdefault(transport.hub, {})

    @property
    def peer_id(self) -> str:
        return self.transport.peer_id

    def serve(self, answer: Answer, students: Collection[str] = ()) -> None:
        self._answers[self.peer_id] = answer

    def ask(self, peer: str, request: bytes) -> concurrent.futures.Future:
        answer = self._answers.get(peer)
        if answer is None:
            return _done(exc=ScoreFailed("unreachable", f"{peer} serves no scores"))
        if not 0 < len(request) <= self.max_bytes:
            return _done(exc=ScoreFailed("too_large", f"a request of {len(request)} bytes"))
        status, response = answer(self.peer_id, request)
        if status != "ok":
            return _done(exc=ScoreFailed(f"refused:{status[:32]}"))
        if not 0 < len(response) <= self.max_bytes:
            return _done(exc=ScoreFailed("too_large", f"an answer of {len(response)} bytes"))
        return _done(response)

    def close(self) -> None:
        if self._answers.get(self.peer_id) is not None:
            del self._answers[self.peer_id]
