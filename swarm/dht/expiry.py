"""DHT expirations under which a peer's newest announcement always wins (docs/PROTOCOL.md §5, §10).

hivemind keeps, per (key, subkey), the value with the later expiration and refuses a store whose
expiration is not strictly later than the one it holds. Expirations derived from the clock
(`created_at + max_age_s`, `now + ttl`) therefore let an announcement made while the clock was
ahead lock the slot: a learner whose clock was once an hour fast had 11 later weight
announcements refused until that one expired. So every store of ours under a key gets an
expiration later than any we stored there before:

    expiration = max(wanted, the expiration our entry under the key already has + EPSILON_S)

`Expirations` remembers, per key, the latest expiration this process stored (enough for rollout
announcements: a window's key lives for one window); `stored_expiration` reads the expiration the
DHT holds for our subkey (the weight announcement, whose key outlives restarts), so a restarted
learner replaces what an earlier run stored with a skewed clock. The price is an entry that lives
past its usual lifetime by as much as the clock was ahead.
"""

from __future__ import annotations

import math
from collections import OrderedDict

EPSILON_S = 0.001  # how much later than the expiration it replaces a store's expiration is


class Expirations:
    """Per DHT key, the latest expiration stored by this process (the newest `keep` keys)."""

    def __init__(self, keep: int = 64):
        self.keep = keep
        self._last: OrderedDict[str, float] = OrderedDict()

    def next(self, key: str, wanted: float, held: float | None = None) -> float:
        """The expiration for our next store under `key`: `wanted`, or later than the one we stored there
        before and than `held` (what the DHT holds for our subkey, if read)."""
        floor = max(self._last.get(key, -math.inf), -math.inf if held is None else held)
        expiration = max(wanted, floor + EPSILON_S)
        self._last[key] = expiration
        self._last.move_to_end(key)
        while len(self._last) > self.keep:
            self._last.popitem(last=False)
        return expiration


async def stored_expiration(_dht, node, key: str, subkey: bytes) -> float | None:
    """Runs inside the DHT process: the expiration of the value the DHT holds under (key, subkey), if any."""
    found = await node.get(key, latest=True)
    value = getattr(found, "value", None)
    if value is None or not hasattr(value, "items"):
        return None
    for sub, entry in value.items():
        if sub == subkey:
            return float(entry.expiration_time)
    return None
