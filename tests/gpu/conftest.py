"""CUDA tests (marker `gpu`): run by `make test-gpu` on a machine with a CUDA GPU.

Without one they are skipped with a reason at collection (`make test` leaves this folder out). `make test-gpu`
checks for a GPU first and sets SWARM_REQUIRE_GPU=1, which turns a missing GPU into an error instead, so a
green run always means the tests ran on a GPU.
"""

from __future__ import annotations

import os

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    mine = [i for i in items if i.get_closest_marker("gpu")]
    if torch.cuda.is_available() or not mine:
        return
    if os.environ.get("SWARM_REQUIRE_GPU"):
        raise pytest.UsageError("SWARM_REQUIRE_GPU=1 but torch sees no CUDA GPU here")
    skip = pytest.mark.skip(reason="no CUDA GPU visible to torch; run `make test-gpu` on a GPU machine")
    for item in mine:
        item.add_marker(skip)
