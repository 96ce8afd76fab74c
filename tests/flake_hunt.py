"""Flake hunt: run the real-daemon tests N times, quiet and/or under a CPU load of our own, and print each test's
failures / runs (docs/TESTING.md).

    .venv/bin/python tests/flake_hunt.py                          # tests/integration + tests/adversarial, 5 runs
    .venv/bin/python tests/flake_hunt.py -n 3 --load tests/integration/test_pubsub.py
    .venv/bin/python tests/flake_hunt.py -n 5 --both tests/integration/test_pubsub.py -k relayed

Each run is one `python -m pytest <targets> -p no:cacheprovider` process (its own JUnit XML, so a test's outcome is
read, not guessed from the output). `--load` starts one busy-loop process per core (`--load-procs` to choose) before
each loaded run and stops it after; every load process also ends by itself when its deadline passes or this script
is gone, so none outlives the hunt (Ctrl-C included). `--both` alternates quiet and loaded runs, so a slow drift of
the machine's own load falls on both columns alike. Arguments that are not this script's go to pytest (a test
path, `-k`, ...). Exit status: 0 when no test failed in any run, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TARGETS = ["tests/integration", "tests/adversarial"]
# one core's busy loop: spins until its deadline or until its parent (this script) is gone, checking both 10×/s
BUSY = ("import os,sys,time\nend,parent=float(sys.argv[1]),int(sys.argv[2])\n"
        "while time.time()<end and os.getppid()==parent:\n t=time.time()+0.1\n while time.time()<t: pass\n")


class Load:
    """`procs` busy-loop processes for the life of a `with` block (each bounded by `max_s` on its own too)."""

    def __init__(self, procs: int, max_s: float):
        self.procs, self.max_s = procs, max_s
        self.children: list[subprocess.Popen] = []

    def __enter__(self) -> Load:
        end = time.time() + self.max_s
        for _ in range(self.procs):
            self.children.append(subprocess.Popen([sys.executable, "-c", BUSY, str(end), str(os.getpid())]))
        return self

    def __exit__(self, *exc) -> None:
        for child in self.children:  # only the processes we started, by their own handle
            if child.poll() is None:
                child.terminate()
        for child in self.children:
            try:
                child.wait(5)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        self.children.clear()


def run_pytest(targets: list[str], xml: Path, timeout_s: float) -> tuple[int, float]:
    """One pytest run writing JUnit XML to `xml`; (its exit status, seconds). Past `timeout_s` (or on Ctrl-C) its
    process group gets SIGINT (pytest then tears its fixtures down), then SIGKILL 30 s later."""
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *targets, "-p", "no:cacheprovider", "-q",
                             f"--junitxml={xml}", "-o", "junit_family=xunit1"], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except BaseException as exc:  # timeout, Ctrl-C
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if not isinstance(exc, subprocess.TimeoutExpired):
            raise
        return 124, time.monotonic() - t0
    tail = [line for line in out.splitlines() if line.startswith(("FAILED", "ERROR"))] + out.splitlines()[-1:]
    print("\n".join(f"    {line}" for line in tail), flush=True)
    return proc.returncode, time.monotonic() - t0


def outcomes(xml: Path) -> dict[str, str]:
    """test id → passed / failed / skipped, from one run's JUnit XML (a setup error counts as failed)."""
    if not xml.is_file():
        return {}
    got = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = f"{case.get('file') or case.get('classname', '').replace('.', '/') + '.py'}::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            got[name] = "failed"
        elif case.find("skipped") is not None:
            got.setdefault(name, "skipped")
        else:
            got.setdefault(name, "passed")
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-n", "--runs", type=int, default=5, help="runs per mode (default 5)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--load", action="store_true", help="every run under our own CPU load")
    mode.add_argument("--both", action="store_true", help="N quiet and N loaded runs, alternating")
    ap.add_argument("--load-procs", type=int, default=os.cpu_count() or 1, help="busy loops (default: one a core)")
    ap.add_argument("--timeout-s", type=float, default=3600, help="one pytest run's limit (default 3600)")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args, targets = ap.parse_known_args(argv)
    targets = targets or DEFAULT_TARGETS
    modes = ["quiet", "loaded"] if args.both else ["loaded" if args.load else "quiet"]
    tally: dict[str, dict[str, list[int]]] = defaultdict(lambda: {m: [0, 0] for m in modes})  # test → mode → [fail, runs]
    walls: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="flake-hunt-") as tmp:
        for i in range(args.runs):
            for m in modes:
                xml = Path(tmp) / f"{m}-{i}.xml"
                print(f"run {i + 1}/{args.runs} {m}: pytest {' '.join(targets)}", flush=True)
                if m == "loaded":
                    with Load(args.load_procs, args.timeout_s + 60):
                        rc, wall = run_pytest(targets, xml, args.timeout_s)
                else:
                    rc, wall = run_pytest(targets, xml, args.timeout_s)
                walls[m].append(wall)
                got = outcomes(xml)
                if rc == 124 or not got:
                    tally[f"(the whole run: exit {rc})"][m][0] += 1
                    tally[f"(the whole run: exit {rc})"][m][1] += 1
                for name, outcome in got.items():
                    if outcome != "skipped":
                        tally[name][m][0] += outcome == "failed"
                        tally[name][m][1] += 1
    print_table(tally, modes, walls, args.markdown)
    return 1 if any(t[m][0] for t in tally.values() for m in modes) else 0


def print_table(tally: dict, modes: list[str], walls: dict[str, list[float]], markdown: bool) -> None:
    rows = sorted(tally.items(), key=lambda kv: (-sum(kv[1][m][0] for m in modes), kv[0]))
    heads = ["test", *[f"{m} failures/runs" for m in modes]]
    cells = [[name, *[f"{t[m][0]}/{t[m][1]}" for m in modes]] for name, t in rows]
    if markdown:
        print("| " + " | ".join(heads) + " |\n|" + "---|" * len(heads))
        print("\n".join("| " + " | ".join(c) + " |" for c in cells))
    else:
        width = max([len(heads[0]), *(len(c[0]) for c in cells)])
        print("\n" + "  ".join([heads[0].ljust(width), *heads[1:]]))
        for c in cells:
            print("  ".join([c[0].ljust(width), *(v.rjust(len(h)) for v, h in zip(c[1:], heads[1:]))]))
    for m in modes:
        if walls[m]:
            print(f"{m}: {len(walls[m])} runs, {sum(walls[m]) / len(walls[m]):.0f} s a run on average")


def _interrupt(*_):
    raise KeyboardInterrupt  # SIGTERM: stop the load and the run as Ctrl-C does


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started in the background, where SIGINT is ignored
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\ninterrupted: the load and the pytest run were stopped", file=sys.stderr)
        sys.exit(130)
