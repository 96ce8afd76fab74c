"""Our own limit on a gossip spammer (`swarm.gossip_ban_s`, 0 = off): a publisher over its allowance is banned,
its messages dropped unread, and our daemon's connections to it closed.

p2pd relays every well-signed message of a topic before we see it, and its control protocol has no validator
and no peer-scoring parameters (swarm.net.pubsub), so the only lever we hold over a peer that floods the topic
is the connection: p2pd's DISCONNECT control request (`Pubsub.disconnect`). The guard decides when to pull it.

    allowance   each signer (the publisher our daemon verified) may gossip BURST messages at once, refilled at
                RATE_PER_S a second (a token bucket per signer). An honest peer gossips at most one
                announcement per publish, one per round, paced to half this allowance (PUBLISH_RATE_PER_S,
                PUBLISH_BURST: a node with faster rounds gossips its newest announcement when the pace allows;
                swarm.exchange.gossip), and the Inbox keeps at most MAX_CANDIDATES_PER_PEER of a peer's waiting
                (swarm.exchange.receive): more than that is work the Inbox only throws away. The messages count
                whatever they hold (valid, invalid, repeated): each one is traffic.
    ban         a signer that runs its allowance dry is banned for `ban_s` seconds: its messages, the one that
                ran it dry included, are dropped before the Inbox sees them (counted by the caller as the drop
                reason `banned`), and our daemon disconnects it at once;
    bounded     while it is banned, a further message of its own triggers at most one more disconnect per
                DISCONNECT_EVERY_S (it dialled again, or a neighbour relays it); at most MAX_BANNED signers are
                banned at once (past that, the ban that ends first goes) and at most MAX_TRACKED buckets are
                kept (swarm.bucket.Buckets: the least recently heard forgotten first, to start full again), so
                the work per message is O(1) amortised and the memory is bounded whatever the number of
                identities.

Counters: `banned` (bans made), `disconnects` (disconnect requests sent), `disconnect_failures`.

What it does not do: a spammer that signs each message with a fresh identity stays under every per-signer
allowance and is not contained (the Inbox's caps and quotas still bound what it costs after receipt); a banned
peer that dials again is cut again on its next message, not before; the daemon reports who published a message,
not which neighbour relayed it, so what other peers relay reaches us until they ban it too (every guarded peer
and a guarded bootstrap relay do so on their own); and the bytes the daemon received before the ban are spent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from swarm.bucket import Buckets

log = logging.getLogger(__name__)

RATE_PER_S = 1.0  # a signer's allowance refills at this many gossiped messages a second
BURST = 20  # … up to this many at once
DISCONNECT_EVERY_S = 2.0  # at most one disconnect per banned signer per this many seconds
MAX_BANNED = 256  # signers banned at once
MAX_TRACKED = 4096  # signers whose allowance is tracked
# what we gossip ourselves (swarm.exchange.gossip.GossipAnnouncements.publish): half the allowance, so an honest peer
# with rounds faster than a second, or a clock drifting, never runs another's allowance dry
PUBLISH_RATE_PER_S = RATE_PER_S / 2
PUBLISH_BURST = BURST // 2


class GossipGuard:
    """The per-signer allowance, ban list and disconnects of one subscription (module docstring); on one loop."""

    def __init__(self, disconnect: Callable[[str], Awaitable[None]], spawn: Callable, ban_s: float, *,
                 rate_per_s: float = RATE_PER_S, burst: int = BURST, every_s: float | None = None,
                 max_banned: int = MAX_BANNED, max_tracked: int = MAX_TRACKED,
                 clock: Callable[[], float] = time.monotonic):
        self.ban_s = ban_s
        self.rate_per_s, self.burst = rate_per_s, burst
        self.every_s = DISCONNECT_EVERY_S if every_s is None else every_s
        self.max_banned, self.max_tracked = max_banned, max_tracked
        self.clock = clock
        self.banned = 0  # bans made
        self.disconnects = 0  # disconnect requests sent
        self.disconnect_failures = 0
        self._disconnect = disconnect
        self._spawn = spawn
        self._buckets = Buckets(rate_per_s, burst, max_tracked)  # signer → its allowance
        self._bans: dict[str, list[float]] = {}  # signer → [banned until, last disconnect], earliest end first

    def admit(self, signer: str) -> bool:
        """Count one message of `signer`; False: it is banned (drop the message unread)."""
        if self.ban_s <= 0 or not signer:
            return True
        now = self.clock()
        ban = self._bans.get(signer)
        if ban is not None:
            if now < ban[0]:
                self._cut(signer, ban, now)
                return False
            del self._bans[signer]
        if self._buckets.take(signer, 1.0, now):
            return True
        self._buckets.forget(signer)  # after the ban it starts with its whole allowance
        self._ban(signer, now)
        return False

    def is_banned(self, signer: str) -> bool:
        ban = self._bans.get(signer)
        return ban is not None and self.clock() < ban[0]

    def banned_peers(self) -> list[str]:
        """The signers banned now."""
        now = self.clock()
        return [p for p, (until, _) in self._bans.items() if now < until]

    def _ban(self, signer: str, now: float) -> None:
        for p in [p for p, (until, _) in self._bans.items() if until <= now]:
            del self._bans[p]
        while len(self._bans) >= self.max_banned:
            del self._bans[next(iter(self._bans))]  # every ban lasts ban_s: the first in ends first
        self._bans[signer] = [now + self.ban_s, float("-inf")]
        self.banned += 1
        log.warning("gossip: %s is over its allowance (%d messages at once, %.3g/s); banned for %.0f s and "
                    "disconnected", signer[:16], self.burst, self.rate_per_s, self.ban_s)
        self._cut(signer, self._bans[signer], now)

    def _cut(self, signer: str, ban: list[float], now: float) -> None:
        if now - ban[1] < self.every_s:
            return
        ban[1] = now
        self.disconnects += 1
        self._spawn(self._disconnect_quietly(signer))

    async def _disconnect_quietly(self, signer: str) -> None:
        try:
            await self._disconnect(signer)
        except Exception as exc:  # the daemon refused, or its socket is gone: counted, tried again on a later message
            self.disconnect_failures += 1
            log.debug("gossip: disconnecting %s failed: %r", signer[:16], exc)
