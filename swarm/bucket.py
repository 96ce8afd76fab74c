"""Token buckets: the one rate limiter of the package, alone and one per key.

    TokenBucket   `rate` tokens a second up to `burst`, starting full; `take(n, now)` takes n when it has them
                  (nothing when it has not), `give_back(n)` returns tokens taken but not spent, `wait_s(n, now)`
                  says how long until n are there. The caller passes the time (a clock it chose, so tests drive
                  it), and a bucket is refilled only when it is read.
    Buckets       a TokenBucket per key (a peer id, a requester) with a bounded number of keys: the least recently
                  used key past `max_keys` is forgotten, and a forgotten key starts full again — so forgetting
                  only ever gives a key back what it would regain by waiting; the bucket of a key a stranger can
                  invent costs O(1) memory and work per use.

Used by: swarm.exchange.gossip_guard (each gossip signer's allowance), swarm.exchange.gossip (our own publish pace),
swarm.dht.budget (DHT requests served per sender), swarm.net.dial (connects to new addresses) and
node.distill.serve (tokens scored, in all and per requester). Not thread-safe: a caller shared across threads holds
its own lock (node.distill.serve does).
"""

from __future__ import annotations

from collections import OrderedDict


class TokenBucket:
    """`rate` tokens a second, at most `burst`, full at `now` (module docstring)."""

    __slots__ = ("at", "burst", "level", "rate")

    def __init__(self, rate: float, burst: float, now: float):
        self.rate, self.burst, self.level, self.at = float(rate), float(burst), float(burst), now

    def refill(self, now: float) -> float:
        """The tokens there at `now` (what time has added since the last read, up to `burst`)."""
        if now > self.at:
            self.level = min(self.burst, self.level + (now - self.at) * self.rate)
            self.at = now
        return self.level

    def take(self, n: float, now: float) -> bool:
        """Take `n` tokens if they are there at `now`; False (nothing taken) if not."""
        if self.refill(now) < n:
            return False
        self.level -= n
        return True

    def give_back(self, n: float) -> None:
        """Return `n` tokens taken and not spent (never beyond `burst`)."""
        self.level = min(self.burst, self.level + n)

    def wait_s(self, n: float, now: float) -> float:
        """Seconds from `now` until `n` tokens are there (0 if they are; inf if `n` exceeds the burst or nothing refills)."""
        short = n - self.refill(now)
        if short <= 0:
            return 0.0
        if n > self.burst or self.rate <= 0:
            return float("inf")
        return short / self.rate


class Buckets:
    """A TokenBucket per key, at most `max_keys` of them, the least recently used forgotten first."""

    def __init__(self, rate: float, burst: float, max_keys: int):
        self.rate, self.burst, self.max_keys = rate, burst, max_keys
        self._by: OrderedDict[str, TokenBucket] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by)

    def __contains__(self, key: str) -> bool:
        return key in self._by

    def get(self, key: str, now: float) -> TokenBucket:
        """`key`'s bucket (a full one if the key is new or was forgotten), now the most recently used."""
        bucket = self._by.pop(key, None)
        if bucket is None:
            bucket = TokenBucket(self.rate, self.burst, now)
        self._by[key] = bucket
        while len(self._by) > self.max_keys:
            self._by.popitem(last=False)
        return bucket

    def peek(self, key: str) -> TokenBucket | None:
        """`key`'s bucket if it has one, leaving the order as it is."""
        return self._by.get(key)

    def forget(self, key: str) -> None:
        """Drop `key`'s bucket: its next use starts full."""
        self._by.pop(key, None)

    def take(self, key: str, n: float, now: float) -> bool:
        """Take `n` tokens from `key`'s bucket (TokenBucket.take)."""
        return self.get(key, now).take(n, now)
