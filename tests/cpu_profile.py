"""A pytest plugin that records the CPU seconds each test costs — its own process and every child it reaped (node
processes, p2pd daemons, DHT children) — since CPU, unlike wall time, does not depend on the machine's load:

    .venv/bin/python -m pytest tests/unit -p tests.cpu_profile            # writes .cache/test-cpu.json, prints the top 25

Used to find where the suite's CPU goes (docs/TESTING.md): on 2 cores a suite that needs C CPU-seconds cannot run in
less than C / 2 s of wall time, however its tests are scheduled."""

from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path

import pytest

_rows: dict[str, dict] = {}


def _cpu() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    c0, t0 = _cpu(), time.monotonic()
    yield
    _rows[item.nodeid] = {"cpu_s": round(_cpu() - c0, 2), "wall_s": round(time.monotonic() - t0, 2)}


def pytest_sessionfinish(session, exitstatus):
    if not _rows:
        return
    out = Path(os.environ.get("SWARM_TEST_CPU_OUT", ".cache/test-cpu.json"))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        out = out.with_name(f"{out.stem}-{os.environ['PYTEST_XDIST_WORKER']}{out.suffix}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(_rows, indent=1) + "\n")


def pytest_terminal_summary(terminalreporter):
    if not _rows:
        return
    total = sum(r["cpu_s"] for r in _rows.values())
    terminalreporter.write_sep("=", f"CPU seconds per test (own + reaped children): {total:.0f} s in all")
    for nodeid, r in sorted(_rows.items(), key=lambda kv: -kv[1]["cpu_s"])[:25]:
        terminalreporter.write_line(f"{r['cpu_s']:8.1f} cpu  {r['wall_s']:8.1f} wall  {nodeid}")
