"""The network-namespace hosts of bench/harness/netns.py for tests: where namespaces cannot be made (not root, no
`ip`, `ip netns add` refused) a test that asks for them is skipped with the reason instead of failing.

    with Hosts(["boot", "a", "b"], subnet="10.231.7") as hosts:   # 10.231.7.1, .2, .3
        proc = hosts.popen("a", [sys.executable, "-m", "ops.cli", ...], stdout=...)
"""

from __future__ import annotations

import pytest

from bench.harness import netns
from bench.harness.netns import ip_binary

__all__ = ["Hosts", "ip_binary", "skip_unless_available"]


def skip_unless_available() -> str:
    """The `ip` binary, or pytest.skip with why network namespaces cannot be made here."""
    try:
        return netns.check_available()
    except netns.Unavailable as why:
        pytest.skip(str(why))


class Hosts(netns.Hosts):
    """bench.harness.netns.Hosts, skipping the test where namespaces cannot be made."""

    def __init__(self, names: list[str], **kw):
        skip_unless_available()
        super().__init__(names, **kw)
