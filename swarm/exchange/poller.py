"""The transport's DHT poll loop, and how often it reads while gossip delivers (docs/PROTOCOL.md §5).

Every `poll_interval_s` an interval ends; one that polls is the PollPlan's next tick: it reads the keys
the plan names (swarm.exchange.polling), offers every signed entry to the Inbox and runs the fan-in
choice. With gossip running (swarm.exchange.gossip), an interval polls only when `PollGate.due` says
so: while gossip delivers — a valid announcement (new, or one a push brought first) arrived by it within the last
`gossip_quiet_polls` poll intervals — every `gossip_poll_every`-th interval reads the DHT and the
others are skipped (counted); when gossip goes quiet, or never delivered, every interval reads
again. So a peer that only polls (gossip off, or a daemon without pubsub) is still seen by a
gossiping one, a few seconds later: every peer stores its announcement in the DHT whatever its
transport. The catch-up reads after a start (the windows of the last max_age_s, two a read) and
the previous window (every PREVIOUS_EVERY-th read) come with the reads that run, so while gossip
delivers they take `gossip_poll_every` times longer; a run of 32 busy peers whose reads took 6 s
never finished its catch-up when catch-up reads were exempt, and skipped no poll at all.
"""

from __future__ import annotations

import asyncio
import logging
import time
from functools import partial

from swarm.dht.peer import read_keys

log = logging.getLogger("swarm.exchange.hivemind")


class PollGate:
    """Whether a tick reads the DHT (module docstring); `skipped` counts the ticks that did not."""

    def __init__(self, every: int, quiet_polls: int, interval_s: float):
        self.every = max(1, every)
        self.quiet_s = quiet_polls * interval_s
        self.skipped = 0
        self._since_read = 0

    def delivering(self, last_gossip: float | None, now: float) -> bool:
        """Gossip delivered a valid new announcement within the quiet window (monotonic times)."""
        return last_gossip is not None and now - last_gossip <= self.quiet_s

    def due(self, last_gossip: float | None, now: float) -> bool:
        self._since_read += 1
        if not self.delivering(last_gossip, now) or self._since_read >= self.every:
            self._since_read = 0
            return True
        self.skipped += 1
        return False


async def poll_forever(t) -> None:
    """The poll loop of HivemindTransport `t` (on its loop)."""
    tick = 0  # reads made: the PollPlan's ticks (every PREVIOUS_EVERY-th of them reads the previous window too)
    while True:
        try:
            gossip = t.gossip
            if gossip is None or t.poll_gate.due(gossip.last_valid, time.monotonic()):
                tick += 1
                await t._poll_once(tick - 1)  # the transport's method (tests and benches wrap it)
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
            if signer != t.peer_id:
                t.inbox.offer(value, signer, now=now, key_window=window, key_shard=shard)
    t._fetch_chosen()
