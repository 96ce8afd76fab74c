"""A stream that p2pd hands a transport for a handler its shutdown has just removed (a peer that
stopped while another fetched from it printed hivemind's DispatchFailure as an "Unhandled exception in
client_connected_cb" traceback). The transport loop's exception handler turns exactly that into a debug
line; hivemind's real dispatcher (ControlClient._handler) is driven over a unix socket here."""

from __future__ import annotations

import asyncio
import logging
import tempfile
from pathlib import Path

from hivemind.p2p.p2p_daemon_bindings.control import ControlClient
from hivemind.p2p.p2p_daemon_bindings.datastructures import PeerID, StreamInfo
from hivemind.p2p.p2p_daemon_bindings.utils import write_pbmsg
from hivemind.utils.multiaddr import Multiaddr

from swarm.exchange.loop import quiet_late_streams


def _stream_for_a_removed_handler(handler) -> None:
    """Open one stream for a protocol the ControlClient has no handler for, on a loop with `handler`."""
    async def run() -> None:
        asyncio.get_running_loop().set_exception_handler(handler)
        with tempfile.TemporaryDirectory() as tmp:
            sock = Path(tmp) / "client.sock"
            client = ControlClient(None, Multiaddr(f"/unix{sock}"), _initialized_with_create=True)
            async with client.listen():
                _, writer = await asyncio.open_unix_connection(str(sock))
                info = StreamInfo(PeerID(b"\x00\x01\x02"), Multiaddr("/ip4/127.0.0.1/tcp/1"), "/rlswarm/bundle/2")
                await write_pbmsg(writer, info.to_protobuf())
                await asyncio.sleep(0.3)  # the dispatcher reads it and raises
                writer.close()
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(run())
    finally:
        loop.close()


def _errors(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_stream_for_a_removed_handler_prints_no_traceback(caplog):
    with caplog.at_level(logging.DEBUG):
        _stream_for_a_removed_handler(quiet_late_streams)
    assert not _errors(caplog), _errors(caplog)
    assert any("removed handler" in r.getMessage() for r in caplog.records)


def test_without_it_asyncio_reports_the_dispatch_failure(caplog):
    # the control: the same stream on a loop with asyncio's default handler is an error with a traceback
    with caplog.at_level(logging.ERROR):
        _stream_for_a_removed_handler(None)
    assert any("client_connected_cb" in m for m in _errors(caplog)), _errors(caplog)


def test_other_loop_errors_still_reach_the_default_handler(caplog):
    loop = asyncio.new_event_loop()
    try:
        with caplog.at_level(logging.ERROR):
            quiet_late_streams(loop, {"message": "something else", "exception": ValueError("boom")})
    finally:
        loop.close()
    assert any("something else" in m for m in _errors(caplog))
