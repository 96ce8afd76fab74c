"""The transport's DHT poll loop, and how often it reads while gossip delivers (docs/PROTOCOL.md §5).

Every `poll_interval_s` an interval ends; one that polls is the PollPlan's next tick: it reads the keys
the plan names (swarm.exchange.polling), offers every signed entry to the Inbox and runs the fan-in
choice. With gossip running (swarm.exchange.gossip), an interval polls only when `PollGate.due` says
so, in one of three modes (`PollGate.mode`, reported by every take):
  - `gossip`: gossip delivers — a valid announcement (new, or one a push brought first) arrived by it
    within the last `gossip_quiet_polls` poll intervals — and no peer that only polls was seen: the DHT
    is read every `gossip_poll_every`-th interval only (discovery of such peers, catch-up), the others
    are skipped (counted), each still running the fan-in choice (what waited for room is fetched);
  - `mixed`: gossip delivers, but a DHT read within that quiet window brought a new valid announcement
    from a peer gossip has never delivered one of (`PollGate.saw_poll_only`: a peer with gossip off, an
    older one, one whose daemon has no pubsub, or one outside our part of the mesh): every interval reads,
    so that peer's announcements are seen as fast as with the DHT alone;
  - `dht`: gossip is quiet or never delivered: every interval reads.
Nothing is exchanged to agree on a mode: each peer infers it from what reaches it, so a peer that only
polls and a gossiping one exchange whatever each runs (docs/PROTOCOL.md §5). Every peer stores its
announcement in the DHT whatever its transport. The catch-up reads after a start (the windows of the
last max_age_s, two a read) and the previous window (every PREVIOUS_EVERY-th read) come with the reads
that run; right after a start they find announcements of peers gossip has not delivered from yet, so the
gate is `mixed` and they run at the full rate.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from functools import partial

from swarm.dht.peer import read_keys

log = logging.getLogger("swarm.exchange.hivemind")


class PollGate:
    """Whether a tick reads the DHT (module docstring); `skipped` counts the ticks that did not."""

    MAX_TRACKED = 4096  # peers remembered as delivered by gossip / seen only by polling (oldest forgotten first)

    def __init__(self, every: int, quiet_polls: int, interval_s: float):
        self.every = max(1, every)
        self.quiet_s = quiet_polls * interval_s
        self.skipped = 0
        self._since_read = 0
        self.gossiped: OrderedDict[str, float] = OrderedDict()  # peer → monotonic time gossip last delivered from it
        self.poll_only: OrderedDict[str, float] = OrderedDict()  # peer → when a read found it new, never gossiped

    def delivering(self, last_gossip: float | None, now: float) -> bool:
        """Gossip delivered a valid new announcement within the quiet window (monotonic times)."""
        return last_gossip is not None and now - last_gossip <= self.quiet_s

    def saw_gossip(self, peer: str, now: float) -> None:
        """Gossip delivered a valid announcement of `peer` (monotonic `now`)."""
        _touch(self.gossiped, peer, now, self.MAX_TRACKED)
        self.poll_only.pop(peer, None)

    def saw_poll_only(self, peer: str, now: float) -> bool:
        """A DHT read brought a new valid announcement of `peer`; True (and remembered) when gossip never
        delivered one of it."""
        if peer in self.gossiped:
            return False
        _touch(self.poll_only, peer, now, self.MAX_TRACKED)
        return True

    def poll_only_peers(self, now: float) -> int:
        """Peers seen only by polling within the quiet window (older ones forgotten)."""
        while self.poll_only and now - next(iter(self.poll_only.values())) > self.quiet_s:
            self.poll_only.popitem(last=False)
        return len(self.poll_only)

    def mode(self, last_gossip: float | None, now: float) -> str:
        if not self.delivering(last_gossip, now):
            return "dht"
        return "mixed" if self.poll_only_peers(now) else "gossip"

    def due(self, last_gossip: float | None, now: float) -> bool:
        self._since_read += 1
        if self.mode(last_gossip, now) != "gossip" or self._since_read >= self.every:
            self._since_read = 0
            return True
        self.skipped += 1
        return False


def _touch(book: OrderedDict, peer: str, now: float, cap: int) -> None:
    book.pop(peer, None)
    book[peer] = now
    while len(book) > cap:
        book.popitem(last=False)


async def poll_forever(t) -> None:
    """The poll loop of HivemindTransport `t` (on its loop)."""
    tick = 0  # reads made: the PollPlan's ticks (every PREVIOUS_EVERY-th of them reads the previous window too)
    while True:
        try:
            gossip = t.gossip
            if gossip is None or t.poll_gate.due(gossip.last_valid, time.monotonic()):
                tick += 1
                await t._poll_once(tick - 1)  # the transport's method (tests and benches wrap it)
            else:  # no read, but the fan-in choice: a candidate left for want of room is not left until the next
                t._fetch_chosen()  # arrival (a burst of announcements can fill a window's budget)
        except Exception:  # our bug, not a peer's: keep polling, but loudly
            log.exception("polling the swarm's announcements failed")
        await asyncio.sleep(t.cfg.poll_interval_s)


async def poll_once(t, tick: int) -> None:
    """One read of the keys the PollPlan names for `tick`; every signed entry goes to the Inbox."""
    now = time.time()
    keys = t._plan.keys(tick, now)
    with t.inbox.cond:  # peers in good standing are kept first in a crowded key, backed-off ones last
        prefer, avoid = t.inbox.standing.read_order(now)
    try:
        found = await asyncio.wait_for(t._dht.run_coroutine(partial(
            read_keys, keys=list(keys), per_key=t.cfg.max_entries_per_key, counted=True,
            beam=t.cfg.dht_read_beam, prefer=prefer, avoid=avoid), return_future=True),
            t.cfg.dht_timeout_s)
    except Exception as exc:  # a DHT hiccup: the next tick retries
        log.info("DHT read of %d keys failed: %r", len(keys), exc)
        found = {}
    for key, (total, entries) in found.items():
        t._plan.saw(key, total)
        window, shard = keys[key]
        for signer, value in entries:
            if signer != t.peer_id and t.inbox.offer(value, signer, now=now, key_window=window, key_shard=shard) \
                    and t.gossip is not None:
                t.poll_gate.saw_poll_only(signer, time.monotonic())
    t._fetch_chosen()
