"""Task streams that never share an item, and held-out questions kept out of training.

reasoning-gym builds item i of a dataset with seed s from `random.Random(s + i)`, so item (s, i)
*is* item (0, s + i): naive per-node seeds 0, 1, 2 … give nodes nearly the same items, shifted by
one. Every stream here therefore owns its own block of 2^32 seeds — dataset seed = stream id ·
2^32, item index < 2^32 — and two streams can never produce the same item:

    training stream of tasks.seed k       stream k                 (k < 2^29)
    held-out set of tasks.eval_seed e     stream 2^29 + e          (e < 2^29)
    federated private items, split seed s stream 2^30 + 2s         (s < 2^28)
    federated public set,    split seed s stream 2^30 + 2s + 1

The largest dataset seed is below 2^63, so every TaskRef stays a plain msgpack integer.

Distinct items can still ask the same question: the easy configurations used on a CPU have small
question spaces (two 1-digit terms: 200 questions). Held-out questions are therefore excluded
from every training stream by text (`Excluded`): a position whose question is held out is replaced
by a draw from the stream's spare range (index ≥ 2^31, deterministic in the position), and a
peer's task whose question is held out here is dropped as `held_out`. The federated private
items exclude the public questions the same way.
"""

from __future__ import annotations

from collections.abc import Callable

STREAM_SPAN = 1 << 32  # item indexes of one stream: 0 .. 2^32 − 1
SPARE_BASE = 1 << 31  # indexes from here on are the stream's spares (replacements of excluded draws)
MAX_TRAIN_STREAM = (1 << 29) - 1
_EVAL_BASE = 1 << 29
_FED_BASE = 1 << 30
SPARE_TRIES = 64  # spare draws tried for one excluded position


def train_seed(seed: int) -> int:
    """Dataset seed of the training stream of `tasks.seed = seed`."""
    return _block(seed, MAX_TRAIN_STREAM)


def eval_seed(seed: int) -> int:
    """Dataset seed of the held-out set of `tasks.eval_seed = seed`."""
    return _block(_EVAL_BASE + seed, _FED_BASE - 1)


def private_seed(split_seed: int) -> int:
    """Dataset seed of the federated private items of `federated.split.seed = split_seed`."""
    return _block(_FED_BASE + 2 * split_seed, (1 << 31) - 1)


def public_seed(split_seed: int) -> int:
    """Dataset seed of the federated public set of `federated.split.seed = split_seed`."""
    return _block(_FED_BASE + 2 * split_seed + 1, (1 << 31) - 1)


def _block(stream: int, top: int) -> int:
    if not 0 <= stream <= top:
        raise ValueError(f"stream {stream} out of range")
    return stream * STREAM_SPAN


def spare_index(position: int, attempt: int) -> int:
    """The index of a replacement item for an excluded `position` (never a main position)."""
    return SPARE_BASE + (position * SPARE_TRIES + attempt) % SPARE_BASE


class Excluded:
    """Questions a stream must not yield (held-out, or a federated public set's)."""

    def __init__(self, questions: set[str] | frozenset[str] = frozenset()):
        self.questions = frozenset(questions)

    def __contains__(self, question: str) -> bool:
        return question in self.questions

    def first_allowed(self, make: Callable[[int], object], position: int, question_of=lambda t: t.question):
        """Item `position` of a stream (`make(index)`), or its first spare whose question is allowed."""
        item = make(position)
        attempt = 0
        while question_of(item) in self.questions:
            if attempt == SPARE_TRIES:
                raise RuntimeError("the held-out set covers almost the whole question space: lower tasks.eval_size")
            item = make(spare_index(position, attempt))
            attempt += 1
        return item
