"""The benches' round loop: a bench node's quiet options, and `play`, the one loop over `run_round` a bench script
uses (bench/harness's own `run_swarm` and the teacher bench's runs are the others; `tests/unit/test_architecture.py`
fails when a script under bench/ outside bench/harness calls `run_round` itself).

    QUIET     the options a measured node runs with: one torch thread, no periodic evaluation, no console line, no
              checkpoint but the last
    quiet     QUIET with a script's own options over it
    play      run the given rounds of a node in order; each round's record and its wall time from outside
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from node.round.record import RoundRecord

QUIET = {"torch_threads": 1, "eval.every": 0, "metrics.console": False, "checkpoint.every": 10**6}


def quiet(**over) -> dict:
    """QUIET under a script's options (keys as `--set` writes them: "eval.every", "swarm.enabled", ...)."""
    return {**QUIET, **over}


@dataclass(frozen=True)
class Played:
    round: int
    record: RoundRecord  # the round's record, as run_round returned it (node.round.record)
    wall_s: float  # run_round's wall time, measured from outside it


def play(node, rounds: Iterable[int], *, before: Callable[[int], None] | None = None,
         after: Callable[[int, RoundRecord], None] | None = None) -> list[Played]:
    """Run `node`'s rounds in the order given; `before(r)` runs ahead of round r (what a peer sends for it) and
    `after(r, record)` once it is done (what the script reads of the node then), neither inside the timed part."""
    from node.round.loop import run_round

    played = []
    for r in rounds:
        if before is not None:
            before(r)
        t0 = time.perf_counter()
        record = run_round(node, r)
        played.append(Played(r, record, time.perf_counter() - t0))
        if after is not None:
            after(r, record)
    return played
