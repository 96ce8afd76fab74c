"""The hosts of bench/harness/netns.py: without delays they share a bridge; with them the RTT between two hosts
is the sum of their one-way delays (netem where the kernel has it, the user-space switch otherwise); a process
left running on a host is killed when the hosts are removed, and no namespace outlives them. Needs root and
`ip netns` (skips otherwise)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.integration.netns import Hosts

pytestmark = pytest.mark.integration


def test_rtt_is_the_sum_of_the_hosts_delays_and_everything_goes_at_the_end():
    hosts = Hosts(["a", "b", "c"], subnet="10.231.10", delay_ms={"a": 10, "b": 40, "c": 100}, jitter_ms=2)
    with hosts:
        got = hosts.rtt_ms("a", ["b", "c"]) | {"b → c": hosts.rtt_ms("b", ["c"])["c"]}
        sleeper = hosts.popen("b", [sys.executable, "-c", "import time; time.sleep(600)"])
        assert hosts.pids(hosts.ns["b"]) == [sleeper.pid]
    for dst, want in (("b", 50), ("c", 110), ("b → c", 140)):  # a → b, a → c, b → c
        assert all(want - 5 <= x <= want + 40 for x in got[dst]), (dst, got[dst], hosts.delayed_by)
    assert sleeper.wait(5) is not None
    left = subprocess.run([hosts.ip, "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert not any(ns in left for ns in hosts.ns.values()), left


def test_hosts_without_delays_share_a_bridge():
    with Hosts(["a", "b"], subnet="10.231.11") as hosts:
        got = hosts.rtt_ms("a", ["b"])["b"]
        assert hosts.delayed_by == "" and hosts.switch_pid is None
    assert got and max(got) < 50, got
    left = subprocess.run([hosts.ip, "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert not any(ns in left for ns in [*hosts.ns.values(), f"{hosts.tag}sw"]), left
