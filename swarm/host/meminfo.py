"""This machine's available memory, read from /proc/meminfo (no torch, no hivemind: bench/ plans with it too)."""

from __future__ import annotations


def available_bytes() -> int | None:
    """MemAvailable of this machine in bytes (None where /proc/meminfo cannot be read or lacks it)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None
