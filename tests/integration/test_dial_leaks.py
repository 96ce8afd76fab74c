"""A stream open that fails leaves no open connection to p2pd behind (the soak found
"Exception ignored in: StreamWriter.__del__ … AttributeError" tracebacks in a node's log).

hivemind's `ControlClient.stream_open` (behind `call_binary_stream_handler`) leaves its connection to
p2pd's control socket open when the daemon answers with an error (a peer that cannot be dialled: a
ghost, a peer that left); the unclosed StreamWriter is collected later by whatever thread runs the GC,
and asyncio's `__del__` then races the loop thread and prints a traceback. `swarm.net.dial.open_stream`
closes it. Real p2pd, one process, no bootstrap.
"""

from __future__ import annotations

import asyncio
import gc
import warnings

import pytest
from hivemind.p2p import P2P, PeerID

from swarm.net.dial import Unreachable, open_stream

pytestmark = pytest.mark.integration
GHOST = "QmNnooDu7bfjPFoTZYxMNLWUQJyrVwtbZg5gBMjTezGAJN"  # a well-formed peer id nobody serves


def _unclosed(caught) -> int:
    """StreamWriters that were collected while still open (asyncio's __del__ warns "unclosed <StreamWriter …>")."""
    gc.collect()
    return sum("unclosed" in str(w.message) and "StreamWriter" in str(w.message) for w in caught)


async def _try(p2p: P2P, ours: bool) -> None:
    for _ in range(3):
        try:
            if ours:
                await open_stream(p2p, GHOST, "/rlswarm/bundle/2", ["/ip4/127.0.0.1/tcp/9"])  # a closed port
            else:
                await p2p.call_binary_stream_handler(PeerID.from_base58(GHOST), "/rlswarm/bundle/2")
        except Exception:
            pass


@pytest.mark.parametrize("ours", [True, False], ids=["swarm.net.dial.open_stream", "hivemind-alone (control)"])
def test_a_failed_stream_open_leaves_no_connection_open(ours):
    async def run() -> int:
        p2p = await P2P.create(host_maddrs=["/ip4/127.0.0.1/tcp/0"])
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ResourceWarning)
                await _try(p2p, ours)
                return _unclosed(caught)
        finally:
            await p2p.shutdown()
    leaked = asyncio.run(run())
    if ours:
        assert leaked == 0
    else:
        assert leaked >= 1  # what the test would catch: hivemind's own stream_open leaves them open


def test_unreachable_is_what_a_failed_open_raises():
    async def run():
        p2p = await P2P.create(host_maddrs=["/ip4/127.0.0.1/tcp/0"])
        try:
            with pytest.raises(Unreachable):
                await open_stream(p2p, GHOST, "/rlswarm/bundle/2", ["/ip4/127.0.0.1/tcp/9"])
        finally:
            await p2p.shutdown()
    asyncio.run(run())
