"""Progress of long work — model builds, held-out evaluations, benchmark sweeps: k/N, elapsed time and an ETA.

    with Progress("building lab-spell", total=3000, unit="steps", upper_bound=True) as p:
        for step in range(3000):
            ...
            p.update(step + 1)

On a terminal it is a rich progress bar (rich is a dependency), gone when the work is done; anywhere else
(a log file, CI) one plain line every `every_s` seconds and one at the end — nothing at all for work that
ends sooner (a small held-out set stays silent), e.g.
`building lab-spell: 400/3000 steps (13 %) · 0:52 elapsed · ETA 5:38`. `upper_bound`: N is a most (a build
that stops early when its target is reached), so the ETA is a most too ("≤ 5:38").
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


def clock(seconds: float) -> str:
    s = int(max(0.0, seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def line(label: str, k: int, total: int, elapsed: float, unit: str = "", upper_bound: bool = False) -> str:
    """`label: k/N unit (p %) · m:ss elapsed · ETA m:ss` (the ETA from the mean time per item so far)."""
    pct = f" ({100 * k / total:.0f} %)" if total else ""
    eta = "" if not k or k >= total else f" · ETA {'≤ ' if upper_bound else ''}{clock(elapsed / k * (total - k))}"
    return f"{label}: {k}/{total}{' ' + unit if unit else ''}{pct} · {clock(elapsed)} elapsed{eta}"


class Progress:
    def __init__(self, label: str, total: int, *, unit: str = "", upper_bound: bool = False,
                 stream: TextIO | None = None, every_s: float = 10.0, bar: bool | None = None):
        self.label, self.total, self.unit, self.upper_bound = label, total, unit, upper_bound
        self.stream = stream or sys.stderr
        self.every_s, self.k, self.printed = every_s, 0, False
        self.started = self._last = time.monotonic()
        use_bar = self.stream.isatty() if bar is None else bar
        self._bar = self._task = None
        if use_bar:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeElapsedColumn, \
                TimeRemainingColumn
            from rich.console import Console

            self._bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn(unit), TimeElapsedColumn(), TextColumn("ETA" + (" ≤" if upper_bound else "")),
                            TimeRemainingColumn(), console=Console(file=self.stream), transient=True,
                            redirect_stdout=sys.stdout.isatty(), redirect_stderr=False)  # stdout to a file stays there
            self._task = self._bar.add_task(label, total=total)
            self._bar.start()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def update(self, k: int, note: str = "") -> None:
        """k items done (absolute); `note` is shown beside the line (e.g. a loss)."""
        self.k = k
        if self._bar is not None:
            self._bar.update(self._task, completed=k, description=f"{self.label} {note}".rstrip())
            return
        now = time.monotonic()
        if now - self._last >= self.every_s or (k >= self.total and self.printed):
            self._last = now
            self.write(note)

    def advance(self, n: int = 1, note: str = "") -> None:
        self.update(self.k + n, note)

    def write(self, note: str = "") -> None:
        text = line(self.label, self.k, self.total, time.monotonic() - self.started, self.unit, self.upper_bound)
        print(text + (f" · {note}" if note else ""), file=self.stream, flush=True)
        self.printed = True

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
