"""The poll loop (swarm.exchange.poller.poll_forever) runs the fan-in choice every interval, also one whose DHT read
gossip lets it skip: a candidate left for want of room (a burst of announcements — a replay of a peer's fresh
gossip, tests/integration/test_gossip_replay.py — filled the window's fetch budget) is fetched once room frees, not
only at the next arrival. Before, a skipped interval ran nothing, and with gossip delivering the DHT is read every
60th interval: this test saw no choice at all."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from swarm.exchange.poller import poll_forever


def test_a_skipped_interval_still_runs_the_fan_in_choice():
    chosen, polled = [], []

    async def main() -> None:
        t = SimpleNamespace(gossip=SimpleNamespace(last_valid=0.0), cfg=SimpleNamespace(poll_interval_s=0.01),
                            poll_gate=SimpleNamespace(due=lambda last, now: False),
                            _fetch_chosen=lambda: chosen.append(1))

        async def poll_once(tick):
            polled.append(tick)

        t._poll_once = poll_once
        task = asyncio.create_task(poll_forever(t))
        while len(chosen) < 5:
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(asyncio.wait_for(main(), 10))
    assert len(chosen) >= 5 and polled == []
