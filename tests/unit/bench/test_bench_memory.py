"""The bench's memory estimate (bench/harness/memory.py): a job that cannot fit is refused before it starts, and
fewer jobs run side by side where more would not fit — the real-LM sharing benchmark with a 64-row micro-batch was
killed by the kernel at 23 GB on this 24 GiB machine."""

from __future__ import annotations

import pytest

from bench.harness.memory import fits, job_bytes
from bench.learning import sharing

GiB = 1 << 30
SMOL = "examples/papers/sapo-smollm2.yaml"


def test_the_estimate_grows_with_the_micro_batch_and_the_nodes():
    small = job_bytes(SMOL, {"train.micro_batch_rows": 8}, 2)
    assert small is not None and 6 * GiB < small < 11 * GiB  # measured: 2 nodes at 8 rows held 8.3–9.1 GB
    assert job_bytes(SMOL, {"train.micro_batch_rows": 64}, 2) > 20 * GiB  # measured ≈ 22 GB for that step alone
    assert job_bytes(SMOL, {"train.micro_batch_rows": 8}, 4) > small
    assert job_bytes(SMOL, {"train.micro_batch_rows": 8, "train.gradient_checkpointing": True}, 2) < small
    assert job_bytes(SMOL, {"train.device": "cuda"}, 4) < 2 * GiB  # on a GPU the host holds little


def test_fits_refuses_one_job_too_big_and_runs_fewer_side_by_side():
    assert fits(30 * GiB, 2, available=24 * GiB)[0] == 0 and "GiB" in fits(30 * GiB, 2, available=24 * GiB)[1]
    assert fits(8 * GiB, 2, available=12 * GiB) == (1, None)
    assert fits(8 * GiB, 2, available=24 * GiB) == (2, None)
    assert fits(None, 3, available=1) == (3, None)  # an unknown model is not refused


def test_the_sharing_bench_refuses_before_starting_with_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("bench.harness.memory.available_bytes", lambda: 24 * GiB)
    with pytest.raises(SystemExit) as exc:
        sharing.main(["--config", SMOL, "--arms", "C", "D", "--update", "f-tis=", "--seeds", "0", "--rounds", "2",
                      "--nodes", "2", "--set", "train.micro_batch_rows=64", "--results", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs ≈" in err[0] and "micro_batch_rows" in err[0]
    assert not list(tmp_path.glob("*.json"))  # nothing ran
