"""node.books.progress: k/N, elapsed and ETA lines for long work; silent for work that ends quickly."""

import io

from node.books import progress as P
from node.books.progress import Progress, clock, line


def test_line_has_k_of_n_elapsed_and_eta():
    assert line("build", 3, 10, 30.0, "steps") == "build: 3/10 steps (30 %) · 0:30 elapsed · ETA 1:10"
    assert line("build", 3, 10, 30.0, "steps", upper_bound=True).endswith("ETA ≤ 1:10")
    assert line("eval", 10, 10, 75.0) == "eval: 10/10 (100 %) · 1:15 elapsed"  # done: no ETA
    assert clock(3725) == "1:02:05"


def test_plain_lines_throttled_and_silent_when_quick(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(P.time, "monotonic", lambda: now[0])
    out = io.StringIO()
    with Progress("eval", 4, unit="items", stream=out, every_s=10, bar=False) as p:
        for _ in range(4):  # all within a second: nothing printed
            now[0] += 0.2
            p.advance()
    assert out.getvalue() == ""
    out = io.StringIO()
    with Progress("sweep", 3, unit="runs", stream=out, every_s=10, bar=False) as p:
        for _ in range(3):
            now[0] += 12
            p.advance(note="gain +0.1")
    lines = out.getvalue().splitlines()
    assert lines[0] == "sweep: 1/3 runs (33 %) · 0:12 elapsed · ETA 0:24 · gain +0.1"
    assert lines[-1].startswith("sweep: 3/3 runs (100 %) · 0:36 elapsed") and len(lines) == 3


def test_a_terminal_gets_a_rich_bar_instead_of_lines():
    out = io.StringIO()
    with Progress("build", 5, stream=out, bar=True, every_s=0) as p:
        assert p._bar is not None
        p.update(5)
        assert not p.printed  # the bar, not plain lines
    assert p._bar is None
