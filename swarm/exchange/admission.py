"""How many streams of one kind a node handles at once, and for whom (docs/PROTOCOL.md §6.5).

Any peer may open streams to a node, and identities are free, so every stream handler admits a
stream before it reads a byte of it, in a pool of its own libp2p protocol (never shared with another protocol's,
whatever the handlers are called): at most `per_peer` at once from one peer, at most `total` at
once from everyone, of which peers not in good standing (swarm.exchange.standing) hold at most half — so
however many identities open streams, the peers whose bundles this node uses keep half the
handler. A stream not admitted is closed at once and counted (`refused`) — a bundle stream after a busy answer
(swarm.net.wire.answer_busy: its request read, `busy` with a retry_after written, each within 2 s; at most
MAX_REFUSING being answered at once): the receiver tries again later and does not count the publisher failed.
Serving adds a book of
what each requester fetched: one requester is served the same bundle at most `repeats` times
within max_age_s (a receiver fetches a bundle once; a digest is public, and re-fetching it without
end is how a peer would spend a publisher's upload). Bounded: at most `max_requesters` requesters are
remembered (the oldest forgotten first). All of it runs on the transport's event loop (one thread).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager

MAX_BUNDLES_PER_REQUESTER = 256  # bundles remembered per requester (the oldest forgotten first)
TOTAL_STREAMS = 32  # streams of one handler at once, in all (half of them for peers not in good standing)
MAX_REFUSING = 64  # refused streams of one handler being answered (busy) at once; past it, closed unread


class Admission:
    """Streams of one handler in flight, per peer and in all (module docstring)."""

    def __init__(self, *, per_peer: int, total: int, is_good: Callable[[str], bool]):
        self.per_peer, self.total, self.is_good = per_peer, total, is_good
        self._open: Counter = Counter()  # peer → streams in flight
        self._strangers = 0  # of which from peers not in good standing
        self.refused: Counter = Counter()  # why streams were refused: per_peer / total / strangers
        self.refusing = 0  # refused streams being answered now (StreamGuards.admitted's `refuse`)

    def _why_not(self, peer: str, stranger: bool) -> str | None:
        if self._open[peer] >= self.per_peer:
            return "per_peer"
        if sum(self._open.values()) >= self.total:
            return "total"
        if stranger and self._strangers >= max(1, self.total // 2):
            return "strangers"
        return None

    @contextmanager
    def admit(self, peer: str) -> Iterator[bool]:
        """`with admission.admit(peer) as ok:` — ok False: refused (counted); the stream is to be closed."""
        stranger = not self.is_good(peer)
        why = self._why_not(peer, stranger)
        if why is not None:
            self.refused[why] += 1
            yield False
            return
        self._open[peer] += 1
        self._strangers += stranger
        try:
            yield True
        finally:
            self._open[peer] -= 1
            if not self._open[peer]:
                del self._open[peer]
            self._strangers -= stranger


class ServedBook:
    """Which bundles each requester was served within max_age_s (module docstring)."""

    def __init__(self, *, repeats: int = 2, max_age_s: float = 600.0, max_requesters: int = 4096,
                 clock: Callable[[], float] = time.time):
        self.repeats, self.max_age_s, self.max_requesters, self.clock = repeats, max_age_s, max_requesters, clock
        self._served: OrderedDict[str, dict[str, tuple[int, float]]] = OrderedDict()  # requester → sha → (n, first)
        self.refused = 0

    def allow(self, requester: str, sha256: str) -> bool:
        """Count one serve of `sha256` to `requester`; False (counted) when it already had its repeats."""
        now = self.clock()
        book = self._served.pop(requester, {})
        book = {s: v for s, v in book.items() if now - v[1] < self.max_age_s}
        n, first = book.get(sha256, (0, now))
        ok = n < self.repeats
        if ok:
            book[sha256] = (n + 1, first)
            while len(book) > MAX_BUNDLES_PER_REQUESTER:
                del book[next(iter(book))]
        else:
            self.refused += 1
        if book:
            self._served[requester] = book  # most recent last
        while len(self._served) > self.max_requesters:
            self._served.popitem(last=False)
        return ok


PULLS_PER_PEER = 1  # pulls of one publisher in flight at once: one below what it admits (Admission.per_peer, 2)


class DownloadSlots:
    """Bundle downloads in flight, pulled and pushed together: at most `n`, of which peers not in good standing
    hold at most half, and one peer at most `per_peer` — the streams a publisher admits from one requester
    (Admission). Pulls of one publisher are kept to `pulls` (PULLS_PER_PEER) at once, one below what it admits:
    a stream we have closed may still hold its admission for a moment (its handler has not returned yet on a
    loaded machine), and the next pull must not be the one it refuses (docs/PROTOCOL.md §6.5). A pushed bundle
    waits for a slot at most a few seconds (the pusher's stream is open meanwhile) and is declined at once when the
    pusher already holds `per_peer`; a pull we chose waits as long as it takes, for the peer's own slot too. Runs on
    the transport's event loop."""

    def __init__(self, n: int, is_good: Callable[[str], bool], per_peer: int = 2, pulls: int = PULLS_PER_PEER):
        self._all = asyncio.Semaphore(n)
        self._strangers = asyncio.Semaphore(max(1, n // 2))
        self.per_peer, self.pulls, self.is_good = per_peer, max(1, min(pulls, per_peer)), is_good
        self._by_peer: Counter = Counter()  # slots each peer holds or has reserved
        self._freed = asyncio.Condition()  # a peer's slot was given back

    @asynccontextmanager
    async def hold(self, peer: str, wait_s: float | None = None) -> AsyncIterator[bool]:
        """`async with slots.hold(peer, wait_s) as ok:` — ok False: no slot within wait_s (nothing is held).
        wait_s None: a pull (waits for the peer's pull slot, then for a shared one); else a push."""
        if wait_s is not None and self._by_peer[peer] >= self.per_peer:
            yield False
            return
        if wait_s is None:
            async with self._freed:
                await self._freed.wait_for(lambda: self._by_peer[peer] < self.pulls)
        self._by_peer[peer] += 1  # reserved at once: no other pull of this peer passes the check meanwhile
        stranger = not self.is_good(peer)
        held: list[asyncio.Semaphore] = []
        try:
            try:
                for sem in ([self._strangers] if stranger else []) + [self._all]:
                    await asyncio.wait_for(sem.acquire(), wait_s)
                    held.append(sem)
            except asyncio.TimeoutError:
                yield False
                return
            yield True
        finally:
            self._by_peer[peer] -= 1
            if not self._by_peer[peer]:
                del self._by_peer[peer]
            for sem in held:
                sem.release()
            async with self._freed:
                self._freed.notify_all()


class StreamGuards:
    """The admission of each stream handler of one transport, and its book of bundles served."""

    def __init__(self, is_good: Callable[[str], bool], *, max_age_s: float, per_peer: int = 2,
                 total: int = TOTAL_STREAMS):
        self.is_good, self.per_peer, self.total = is_good, per_peer, total
        self.served = ServedBook(max_age_s=max_age_s)
        self.admissions: dict[str, Admission] = {}  # libp2p protocol id → its admission

    def admitted(self, protocol: str, handler: Callable[..., Awaitable[None]],
                 is_good: Callable[[str], bool] | None = None,
                 refuse: Callable[..., Awaitable[None]] | None = None) -> Callable[..., Awaitable[None]]:
        """`handler(info, reader, writer)` behind the Admission of its libp2p `protocol` (one pool per protocol, never
        shared with another's): a stream not admitted is closed — answered by `refuse(reader, writer)` first when
        given (the bundle stream's busy answer; at most MAX_REFUSING such answers of one protocol at once, past them
        closed unread), else at once. `is_good`: who counts as in good standing for this protocol (default: the
        exchange's standing)."""
        admission = self.admissions.get(protocol)
        if admission is None:
            admission = self.admissions[protocol] = Admission(per_peer=self.per_peer, total=self.total,
                                                               is_good=is_good or self.is_good)

        async def guarded(info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await admit_and_handle(info, reader, writer)
            except asyncio.CancelledError:  # the transport shutting down: end quietly (see the comment below)
                writer.close()

        # A stream handler runs as the task of asyncio's connection callback, whose done-callback on CPython 3.11 asks a
        # cancelled task for its exception and logs the CancelledError as "Exception in callback" (a traceback in the
        # log of a node that only shut down). So a handler cancelled at shutdown returns instead: nothing awaits its
        # task, and nothing after the cancel is left undone but closing the stream.
        async def admit_and_handle(info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with admission.admit(info.peer_id.to_base58()) as ok:
                if ok:
                    await handler(info, reader, writer)
                    return
            if refuse is None or admission.refusing >= MAX_REFUSING:
                writer.close()
                return
            admission.refusing += 1
            try:
                await refuse(reader, writer)
            finally:
                admission.refusing -= 1
        return guarded

    def refused(self) -> Counter:
        """Streams refused, by "<protocol>:<why>", and bundles declined to a requester that had them (served)."""
        out = Counter({f"{name}:{why}": n for name, a in self.admissions.items() for why, n in a.refused.items()})
        if self.served.refused:
            out["served:repeat"] = self.served.refused
        return out
