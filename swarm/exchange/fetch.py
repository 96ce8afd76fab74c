"""Fetching one announced bundle over the bundle stream (docs/PROTOCOL.md §6.1). What a fetch's failure is counted
as: `fetch_timeout` when the whole exchange ran past its bound, `digest_mismatch` when the bytes are not the
announced ones, `busy` when the publisher answered busy (its admission had no room: not a failure, the caller tries
again after `retry_after_s`, at most BUSY_TRIES times in all, swarm.exchange.hivemind), `fetch_failed` for everything
else (unreachable, `not_found`, `bad_request`, `declined`, a short stream, a frame over its limit). It never raises on
peer data. (Pushing one announcement to a peer, §6.2, §10, is swarm.net.wire.notify.)
"""

from __future__ import annotations

import asyncio
import logging
from typing import NamedTuple

from protocols.records import Announcement
from swarm.net import wire
from swarm.net.dial import DialPolicy, open_stream

log = logging.getLogger(__name__)
BUSY_TRIES = 4  # a bundle whose publisher answers busy is asked for this many times in all, then dropped as `busy`


class Fetched(NamedTuple):
    data: bytes | None  # the verified bundle bytes, or None
    reason: str  # "" or the drop reason
    error: str  # what went wrong ("" when nothing did)
    retry_after_s: float = 0.0  # reason "busy": the publisher's retry_after (bounded: swarm.net.wire.retry_after)


async def fetch_announced(p2p, ann: Announcement, *, swarm_id: str, timeout_s: float,
                          policy: DialPolicy | None = None) -> Fetched:
    """(bundle bytes, "", "") or (None, drop reason, what went wrong[, retry after]); dials the announced addresses
    first (those `policy` allows)."""
    writer = None
    try:
        async def fetch() -> bytes:
            nonlocal writer
            reader, writer = await open_stream(p2p, ann.peer, wire.HANDLER_NAME, ann.addrs.split(), policy)
            return await wire.fetch_bundle(reader, writer, swarm=swarm_id, sha256=ann.sha256, nbytes=ann.nbytes)
        return Fetched(await asyncio.wait_for(fetch(), timeout_s), "", "")
    except wire.FetchError as exc:
        if exc.reason == wire.BUSY:
            log.debug("%s is busy; asking again in %.1f s", ann.peer[:12], exc.retry_after_s)
            return Fetched(None, "busy", str(exc), exc.retry_after_s)
        reason = "digest_mismatch" if exc.reason == "digest_mismatch" else "fetch_failed"
        error = str(exc)
    except asyncio.TimeoutError:
        reason = "fetch_timeout"
        error = f"no bundle within {timeout_s:g} s"
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # unreachable peer, daemon error: counted, never raised
        reason = "fetch_failed"
        error = str(exc) or type(exc).__name__
    finally:
        if writer is not None:
            writer.close()
    log.info("fetch of %s's bundle: %s (%s)", ann.peer[:12], reason, error)
    return Fetched(None, reason, error)
