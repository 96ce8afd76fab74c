"""Our own limit on a gossip spammer (`swarm.gossip_ban_s`, 0 = no bans), built so that it cannot be turned against
the peer it judges.

Every subscriber receives each gossiped message whole — the publisher's signature included (swarm.net.pubsub) — so
anyone can write an honest peer's old messages back into the mesh, and a daemon delivers them again once its own
duplicate cache (120 s) has forgotten their ids. What a message proves is therefore only what its signer signed: the
announcement's bytes, and in them its `created_at`; never when, how often or through whom it reaches us. The guard
judges a signer by that alone:

    distinct    a gossiped announcement counts once: its digest (signer + value bytes) is kept in a seen-cache
                at least until it has gone stale (below), and a repeat is dropped (drop reason `gossip_duplicate`)
                without counting against anyone, whoever sends it and however often;
    fresh       an announcement whose `created_at` is more than MAX_AGE_S behind our clock is dropped (drop
                reason `gossip_stale`) without counting: gossip reaches every subscriber within seconds, so only a
                replay (or a clock off by minutes, whose announcements the DHT still carries) makes one that old.
                As the seen-cache holds an entry until then, every replay is one or the other;
    allowance   what counts is the signer's own timeline: at most SLOT_LIMIT distinct fresh announcements whose
                `created_at` falls in one SLOT_S slot (20 at once plus 1 a second: BURST + RATE_PER_S × SLOT_S).
                An honest peer gossips at most PUBLISH_BURST at once and PUBLISH_RATE_PER_S after that (its pace,
                swarm.exchange.gossip), so at most 15 dated in any 10 s (30 if its clock steps back a whole slot):
                whatever order, delay or batching a replayer gives its messages, they stay within the allowance;
    ban         a signer past it — one that itself signed more than SLOT_LIMIT announcements dated within one
                slot — is banned for `ban_s` seconds: its gossiped messages, the one that went past included, are
                dropped unread before the Inbox (drop reason `banned`). Nothing else happens to it: no
                disconnect (p2pd's DISCONNECT would also cut its bundle streams and pushes, and reaches only what
                it sends us directly), no effect on its pushes, bundles or DHT announcements;
    not judged  a message that is not an announcement of its signer (undecodable, naming another peer) or dated
                further ahead than `max_skew_s` passes through uncounted: the receive rules drop it with their own
                reason (swarm.exchange.receive) and the Inbox dedups it.

Bounded: the seen-cache holds at most MAX_SEEN digests (2.5 MiB at that bound with its books, measured by
tests/unit/swarm/test_gossip_guard.py; the oldest go first, and one forgotten early is counted again if it comes back, never
twice at once, since a signer's count is the number of its entries held), the per-slot counts exist only for entries
held, and at most MAX_BANNED signers are banned at once (past that, the ban that ends first goes). Work per message:
one decode of a value ≤ 1 KiB and O(1) amortised book-keeping (≈ 20 µs here).

Counters: `banned` (bans made), `duplicates`, `stale` (also counted by the caller as drops by reason).

What it does not do: a spammer that signs with a fresh identity per message stays under every per-signer allowance
(the Inbox's caps and quotas still bound what it costs); a signer can place its allowance in every slot of the
fresh range at once (≈ 24 slots × SLOT_LIMIT) before later ones go past it; our daemon relays every well-signed
message before we see it, banned or not (swarm.net.pubsub), so a ban spares our receive rules, not the traffic.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable

from protocols.announce import decode_announcement
from protocols.codec import RecordError

log = logging.getLogger(__name__)

RATE_PER_S = 1.0  # a signer's allowance: this many announcements a second of its own timestamps …
BURST = 20  # … plus this many at once
SLOT_S = 10.0  # the allowance is counted per slot of this many seconds of `created_at`
SLOT_LIMIT = int(BURST + RATE_PER_S * SLOT_S)  # distinct fresh announcements of one signer dated in one slot
MAX_AGE_S = 120.0  # a gossiped announcement older than this by our clock is stale
MAX_SEEN = 16384  # digests in the seen-cache
MAX_BANNED = 256  # signers banned at once
# what we gossip ourselves (swarm.exchange.gossip.GossipAnnouncements.publish): half the allowance, so an honest peer
# with rounds faster than a second, or a clock stepping back, never goes past another's allowance
PUBLISH_RATE_PER_S = RATE_PER_S / 2
PUBLISH_BURST = BURST // 2


class GossipGuard:
    """The seen-cache, per-signer allowance and ban list of one subscription (module docstring); on one loop."""

    def __init__(self, ban_s: float, *, max_skew_s: float = 120.0, max_age_s: float = MAX_AGE_S,
                 slot_s: float = SLOT_S, slot_limit: int = SLOT_LIMIT, max_seen: int = MAX_SEEN,
                 max_banned: int = MAX_BANNED, clock: Callable[[], float] = time.monotonic):
        self.ban_s = ban_s
        self.max_skew_s, self.max_age_s = max_skew_s, max_age_s
        self.slot_s, self.slot_limit = slot_s, slot_limit
        self.max_seen, self.max_banned = max_seen, max_banned
        self.clock = clock  # for bans; announcements are dated by the wall clock `admit` is given
        self.banned = 0  # bans made
        self.duplicates = 0  # announcements dropped as seen before
        self.stale = 0  # announcements dropped as older than max_age_s
        # digest → (signer, slot), first seen first; a signer's count in a slot is its entries here
        self._seen: OrderedDict[bytes, tuple[str, int]] = OrderedDict()
        self._counts: dict[tuple[str, int], list] = {}  # (signer, slot) → [entries, that key: one tuple shared]
        self._bans: dict[str, float] = {}  # signer → banned until (clock), earliest end first

    def admit(self, signer: str, data: bytes, now: float) -> str | None:
        """Judge one gossiped message of `signer` at wall-clock time `now`: None to pass it on to the receive rules,
        else the drop reason (module docstring)."""
        if not signer:
            return None
        if self.is_banned(signer):
            return "banned"
        try:
            ann = decode_announcement(data)
        except RecordError:
            return None  # not an announcement: the receive rules drop it with their reason
        if ann.peer != signer or ann.created_at - now > self.max_skew_s:
            return None  # forged or dated ahead: the receive rules drop it, and nothing is counted
        self._expire(now)
        digest = hashlib.blake2b(signer.encode() + b"\0" + bytes(data), digest_size=16).digest()
        if digest in self._seen:
            self.duplicates += 1
            return "gossip_duplicate"
        if now - ann.created_at > self.max_age_s:
            self.stale += 1
            return "gossip_stale"
        key = (signer, int(ann.created_at // self.slot_s))
        count = self._counts.get(key)
        if count is None:
            count = self._counts[key] = [0, key]
        count[0] += 1
        self._seen[digest] = count[1]
        while len(self._seen) > self.max_seen:
            self._forget(self._seen.popitem(last=False)[1])
        if self.ban_s > 0 and count[0] > self.slot_limit:
            self._ban(signer, key[1])
            return "banned"
        return None

    def is_banned(self, signer: str) -> bool:
        until = self._bans.get(signer)
        if until is None:
            return False
        if self.clock() < until:
            return True
        del self._bans[signer]
        return False

    def banned_peers(self) -> list[str]:
        """The signers banned now."""
        now = self.clock()
        return [p for p, until in self._bans.items() if now < until]

    def seen(self) -> int:
        """Digests in the seen-cache."""
        return len(self._seen)

    def _expire(self, now: float) -> None:
        """Forget the oldest entries once every announcement their slot can date has gone stale (a replay of one is
        then `gossip_stale`); an entry held past that, behind one inserted earlier, stays a duplicate."""
        while self._seen:
            digest, key = next(iter(self._seen.items()))
            if (key[1] + 1) * self.slot_s + self.max_age_s >= now:
                return
            del self._seen[digest]
            self._forget(key)

    def _forget(self, key: tuple[str, int]) -> None:
        count = self._counts[key]
        count[0] -= 1
        if not count[0]:
            del self._counts[key]

    def _ban(self, signer: str, slot: int) -> None:
        now = self.clock()
        for p in [p for p, until in self._bans.items() if until <= now]:
            del self._bans[p]
        while len(self._bans) >= self.max_banned:
            del self._bans[next(iter(self._bans))]  # every ban lasts ban_s: the first in ends first
        self._bans[signer] = now + self.ban_s
        self.banned += 1
        log.warning("gossip: %s signed more than %d announcements dated within one %.0f s slot (%.0f); banned for "
                    "%.0f s: its gossip is dropped unread", signer[:16], self.slot_limit, self.slot_s,
                    slot * self.slot_s, self.ban_s)
