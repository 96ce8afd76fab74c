"""This process's peak resident memory since a mark, for the tests that bound memory in a fresh process.

Not `resource.getrusage(...).ru_maxrss`: on Linux that carries over the high-water mark of the process
that started this one (exec keeps the old address space's peak), so a child of a large pytest process
reports the parent's peak — a growth bound then measures the parent, and a bound taken as a difference
of two readings cannot fail. `/proc/self/status` VmHWM is this address space's own peak; writing "5" to
`/proc/self/clear_refs` (Linux ≥ 4.0) resets it to the current size."""

from __future__ import annotations


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} is not in /proc/self/status")


def mark() -> int:
    """Reset the peak to the current size where the kernel allows it; the current resident bytes."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:  # without the reset the peak counts from exec: an overestimate, never an underestimate
        pass
    return _status_kib("VmRSS") * 1024


def peak() -> int:
    """The most resident bytes this process has held since `mark()` (or since exec)."""
    return _status_kib("VmHWM") * 1024
