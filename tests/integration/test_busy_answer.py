"""Two honest peers alone, over real p2pd, each publishing and fetching the other's bundles: a publisher whose bundle
streams are still held when the next pull comes answers `busy`, and the receiver asks again later, without counting
it failed (docs/PROTOCOL.md §6.1, §6.5).

What it stands for: a loaded machine, where a stream handler returns a moment after the receiver has its bytes and
closed the stream (the handler's admission is held until it returns), so the receiver's next pull finds the
publisher's two streams per peer still taken. Here the publisher's handler is made to return late on purpose:
after serving, it holds its admission until it has answered `busy` once (at most `HOLD_CAP_S`), which is that
moment made as long as the test needs, whatever the machine's speed (a fixed linger left the overlap to luck). Before the busy answer a receiver pulled up to 2 of one
peer at once, the third stream was closed unread, counted `fetch_failed`, and the honest publisher was backed off —
its next announcements dropped as `backoff` (measured on the old code: see the commit message).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

from swarm.exchange.hivemind import HivemindTransport
from swarm.net import wire
from tests.integration.conftest import peer_config
from tests.integration.test_hivemind_transport import _record

pytestmark = pytest.mark.integration
HOLD_CAP_S = 30.0  # the most the publisher's bundle handler holds its admission after serving
BURST = 6  # bundles the publisher publishes, PERIOD_S apart (each pushed: the DHT keeps only the newest)
PERIOD_S = 0.3


class SlowToClose(HivemindTransport):
    """A publisher whose bundle stream handler, after serving, holds its admission until it has refused a stream
    for its per-peer limit once (the busy answer given), at most HOLD_CAP_S; after that it returns at once."""

    async def _handle_stream(self, info, reader, writer) -> None:
        await super()._handle_stream(info, reader, writer)
        deadline = time.monotonic() + HOLD_CAP_S
        while not self.refused_streams()[f"{wire.HANDLER_NAME}:per_peer"] and time.monotonic() < deadline:
            await asyncio.sleep(0.05)


def _take_until(t: HivemindTransport, done, timeout: float) -> tuple[int, Counter]:
    records, drops = 0, Counter()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        d = t.take(min_records=1, timeout=1.0)
        records += len(d.records)
        drops.update(d.drops)
        if d.records:
            t.judge({p: (1, 0) for p in d.peers})  # the node's verdict: it used them
        if done(records, drops):
            break
    return records, drops


def test_two_honest_peers_alone_never_count_each_other_failed():
    import threading

    from swarm.dht.bootstrap import start_bootstrap

    boot, maddrs = start_bootstrap(startup_timeout_s=60)
    cfg = dict(poll_interval_s=0.5, fetch_timeout_s=10)
    peers = []
    try:
        peers = [SlowToClose(cfg=peer_config(maddrs[:1], **cfg)) for _ in range(2)]
        a, b = peers
        for p in peers:  # each announces once, so that the other pushes to it
            p.publish([_record(p.peer_id, 0, 0)])
        for p, q in ((a, b), (b, a)):
            got, _ = _take_until(p, lambda n, _d: n >= 1, timeout=60)
            assert got >= 1, "a peer never saw the other"
        deadline = time.monotonic() + 60
        while not all(q.peer_id in p.inbox.known_peers() for p, q in ((a, b), (b, a))) and time.monotonic() < deadline:
            time.sleep(0.5)
        out: dict[str, tuple[int, Counter]] = {}

        def receive(p: HivemindTransport) -> None:
            out[p.peer_id] = _take_until(p, lambda n, d: n >= BURST or d["fetch_failed"] or d["backoff"], timeout=120)

        takers = [threading.Thread(target=receive, args=(p,)) for p in peers]
        for t in takers:
            t.start()
        for i in range(1, BURST + 1):
            for p in peers:
                p.publish([_record(p.peer_id, i, i)])
            time.sleep(PERIOD_S)
        for t in takers:
            t.join()
        refused = {p.peer_id: p.refused_streams() for p in peers}
        retried = {p.peer_id: getattr(p, "busy_answers", 0) for p in peers}  # (the old code has none)
    finally:
        for p in peers:
            p.shutdown()
        boot.shutdown()
    for peer, (got, drops) in out.items():
        assert drops["fetch_failed"] == 0 and drops["backoff"] == 0, (drops, refused)
        assert got == BURST and drops["busy"] == 0, (got, drops, refused)  # every busy answer was followed by success
    # the busy answer was given and heeded (the first two pulls hold both streams: the third finds them held)
    assert all(r[f"{wire.HANDLER_NAME}:per_peer"] >= 1 for r in refused.values()) and all(retried.values()), \
        (refused, retried)
