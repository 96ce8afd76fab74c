"""Which rows of a dataset file are trained on, in which order, and which are held out.

Held out: the first `holdout` rows of a permutation seeded by the file's content hash, so every
node holding the same file (and the same `holdout`) holds out the same rows. Training order:
the remaining rows in epochs; epoch e is a permutation seeded by (stream seed, e), and stream
position p is row `order_e[p mod T]` with e = p div T (T training rows), so positions of one
epoch are distinct rows and every row comes once per epoch.
"""

from __future__ import annotations

import random


class FileOrder:
    def __init__(self, n_rows: int, sha256: str, holdout: int):
        perm = list(range(n_rows))
        random.Random(f"holdout/{sha256}").shuffle(perm)
        self.held_out = sorted(perm[:holdout])
        self.held_out_set = frozenset(self.held_out)
        self.train = sorted(perm[holdout:])
        self._epoch: tuple[int, int, list[int]] | None = None  # (seed, epoch, order), the last one used

    def train_row(self, seed: int, position: int) -> int:
        """The row at `position` of the training stream with `seed`."""
        epoch, k = divmod(position, len(self.train))
        if self._epoch is None or self._epoch[:2] != (seed, epoch):
            order = list(self.train)
            random.Random(f"{seed}/epoch/{epoch}").shuffle(order)
            self._epoch = (seed, epoch, order)
        return self._epoch[2][k]
