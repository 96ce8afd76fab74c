"""`swarm.dht_read_beam` reaches hivemind's search: peers polling with a narrow beam still find each other's
announcements through the DHT (pushes off, so the DHT read is the only way a bundle becomes visible)."""

from __future__ import annotations

import pytest

from tests.integration.conftest import transport_swarm
from tests.integration.test_hivemind_transport import _record, _take_until

pytestmark = pytest.mark.integration


def test_a_narrow_read_beam_still_finds_every_announcement():
    with transport_swarm(3, dht_read_beam=2, notify_peers=0, poll_interval_s=0.2) as (_, (a, b, c)):
        a.publish([_record(a.peer_id, 1)])
        c.publish([_record(c.peer_id, 2)])
        got = _take_until(b, lambda d: {r.peer for r in d.records} >= {a.peer_id, c.peer_id}, timeout=45)
        assert {r.peer for r in got.records} == {a.peer_id, c.peer_id}, got.drops
