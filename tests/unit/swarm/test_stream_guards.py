"""A stream handler cancelled while it runs (the transport shutting down) ends its task quietly, its slot given back.

On CPython 3.11 asyncio's connection callback asks a cancelled handler task for its exception, and the
CancelledError is logged as "Exception in callback" with a traceback: seen in the log of a soak's ghost peer
that only shut down (docs/benchmarks/reliability.md §15J)."""

from __future__ import annotations

import asyncio

from swarm.exchange.admission import StreamGuards


class _Info:
    def __init__(self, peer: str):
        self.peer_id = self

    def to_base58(self) -> str:
        return "peer"


class _Writer:
    closed = False

    def close(self):
        self.closed = True


def test_a_handler_cancelled_at_shutdown_ends_its_task_without_an_exception_and_frees_its_slot():
    guards = StreamGuards(lambda _p: True, max_age_s=60.0, per_peer=1, total=4)

    async def forever(info, reader, writer):
        await asyncio.Event().wait()

    guarded = guards.admitted("/rlswarm/push/1", forever)
    writer = _Writer()

    async def main():
        task = asyncio.ensure_future(guarded(_Info("p"), None, writer))
        await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.wait([task])
        return task

    task = asyncio.run(main())
    # before: the task ended cancelled, and asyncio's done-callback (task.exception()) raised CancelledError
    assert not task.cancelled() and task.exception() is None
    assert writer.closed
    assert guards.admissions["/rlswarm/push/1"]._open["peer"] == 0  # the slot is free again
