"""The transport's asyncio loop: its exception handler and how it is emptied before it is closed.

`quiet_late_streams` keeps one known, harmless hivemind exception at shutdown out of the log as a
traceback; `cancel_all_but_me` cancels what is left on the loop so that it can be closed with nothing
pending (swarm.exchange.hivemind.HivemindTransport.shutdown).
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("swarm.exchange.hivemind")


def quiet_late_streams(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    """The transport loop's exception handler: a stream that p2pd hands us for a protocol whose handler
    shutdown has just removed makes hivemind's dispatcher raise DispatchFailure (it has closed the stream
    already), and asyncio would print that as an "Unhandled exception in client_connected_cb" traceback
    in the log of every peer that stops while a peer fetches from it. One debug line instead; anything
    else goes to asyncio's default handler."""
    from hivemind.p2p.p2p_daemon_bindings.utils import DispatchFailure

    if isinstance(context.get("exception"), DispatchFailure):
        log.debug("a stream arrived for a removed handler while shutting down: %s", context["exception"])
        return
    loop.default_exception_handler(context)


async def cancel_all_but_me(timeout_s: float) -> int:
    """Cancel every other task on this loop and wait up to `timeout_s` for them; returns how many did not end."""
    me = asyncio.current_task()
    rest = [t for t in asyncio.all_tasks() if t is not me]
    for task in rest:
        task.cancel()
    if not rest:
        return 0
    _, pending = await asyncio.wait(rest, timeout=timeout_s)
    return len(pending)
