"""Download slots (swarm.exchange.admission.DownloadSlots): pulls from one peer hold at most `pulls` slots at once (1 by
default: one below the streams a publisher admits from one requester, its Admission's 2 per protocol), pulls and
pushes together at most `per_peer`.

Found with tests/integration/test_gossip_replay.py: a newcomer whose first DHT read brought four of a peer's
announcements pulled all four at once (4 stranger slots of 8); the publisher's admission closed the third and fourth
streams unread (`/rlswarm/bundle/2:per_peer`), the newcomer counted them `fetch_failed` and backed the honest publisher
off, and dropped its next announcement as `backoff`. Before the fix pulls waited only for the shared slots, and the
first test here saw 4 pulls of one peer at once. With 2 at once, a publisher whose handler had not yet returned for
a stream the receiver had already closed still refused the next (tests/integration/test_busy_answer.py): by default a
receiver now pulls one bundle of a peer at a time."""

from __future__ import annotations

import asyncio

import pytest

from swarm.exchange.admission import PULLS_PER_PEER, DownloadSlots


@pytest.mark.parametrize("pulls", [None, 2])
def test_pulls_from_one_peer_hold_at_most_their_slots_and_all_of_them_run(pulls):
    async def main() -> tuple[int, list[str]]:
        slots = DownloadSlots(8, is_good=lambda _p: False, per_peer=2, **({} if pulls is None else {"pulls": pulls}))
        held: dict[str, int] = {}
        most = {"a": 0, "b": 0}
        done: list[str] = []

        async def pull(peer: str) -> None:
            async with slots.hold(peer) as ok:
                assert ok
                held[peer] = held.get(peer, 0) + 1
                most[peer] = max(most[peer], held[peer])
                await asyncio.sleep(0.01)
                held[peer] -= 1
            done.append(peer)

        await asyncio.wait_for(asyncio.gather(*(pull(p) for p in ["a"] * 4 + ["b"] * 2)), 10)
        return max(most.values()), done

    most, done = asyncio.run(main())
    assert most == (pulls or PULLS_PER_PEER) and sorted(done) == ["a"] * 4 + ["b"] * 2
    assert PULLS_PER_PEER == 1


def test_a_push_is_declined_while_its_peer_holds_its_slots_and_a_pull_waits_for_one():
    async def main() -> list[bool]:
        slots = DownloadSlots(8, is_good=lambda _p: True, per_peer=2, pulls=2)
        out = []
        release = asyncio.Event()

        async def hold_until_released() -> None:
            async with slots.hold("a"):
                await release.wait()

        holders = [asyncio.create_task(hold_until_released()) for _ in range(2)]
        await asyncio.sleep(0.01)
        async with slots.hold("a", wait_s=0.05) as ok:  # a push from "a": declined at once
            out.append(ok)
        async with slots.hold("b", wait_s=0.05) as ok:  # another peer's push is not affected
            out.append(ok)
        waiting = asyncio.create_task(_pull_flag(slots, "a"))
        await asyncio.sleep(0.05)
        out.append(waiting.done())  # the third pull of "a" waits …
        release.set()
        out.append(await asyncio.wait_for(waiting, 5))  # … and runs once a slot is given back
        await asyncio.gather(*holders)
        return out

    assert asyncio.run(main()) == [False, True, False, True]


async def _pull_flag(slots: DownloadSlots, peer: str) -> bool:
    async with slots.hold(peer) as ok:
        return ok


def test_a_pull_waits_while_its_peer_pushes_and_a_push_is_declined_past_per_peer():
    async def main() -> list[bool]:
        slots = DownloadSlots(8, is_good=lambda _p: True, per_peer=2)  # pulls: 1
        out = []
        release = asyncio.Event()

        async def push_until_released() -> None:
            async with slots.hold("a", wait_s=0.05) as ok:
                out.append(ok)
                await release.wait()

        pusher = asyncio.create_task(push_until_released())
        await asyncio.sleep(0.01)
        pull = asyncio.create_task(_pull_flag(slots, "a"))
        await asyncio.sleep(0.05)
        out.append(pull.done())  # the pull waits: "a" holds one slot, and pulls are one at a time
        release.set()
        out.append(await asyncio.wait_for(pull, 5))
        await pusher
        return out

    assert asyncio.run(main()) == [True, False, True]
