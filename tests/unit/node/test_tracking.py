"""Experiment tracking: every metrics line reaches TensorBoard and W&B (offline), read back by their own formats."""

from __future__ import annotations

import io
import json
import struct
import sys
import time
from pathlib import Path

import pytest

from node.books.metrics import MetricsConfig, MetricsLog
from node.books.tracking import TrackingError, scalars_of
from node.round.record import RoundRecord

LINES = [{"node": "n0", "round": r, "reward_mean": 0.1 * r, "accuracy": 0.5, "eval_accuracy": None,
          "groups_local": 4, "groups_external": r, "external_peers": ["p"], "loss": -0.01 * r, "kl_beh": 0.001,
          "drops": {"dataset_mismatch": r}, "public": False, "tokens_per_s": 100.0, "round_s": 1.0, "step_s": 0.5, "time": 1e9 + r,
          "rows_trained": 8}
         for r in range(3)]


def _log(tmp_path: Path, **cfg) -> MetricsLog:
    return MetricsLog(tmp_path, "n0", MetricsConfig(console=False, **cfg), stream=io.StringIO(),
                      run_config={"name": "n0", "loss": {"name": "grpo"}})


def test_scalars_are_the_numeric_fields_of_the_metrics_line():
    s = scalars_of(LINES[2])
    assert s["reward_mean"] == pytest.approx(0.2) and s["drops/dataset_mismatch"] == 2.0 and s["public"] == 0.0
    assert not {"node", "round", "time", "eval_accuracy", "external_peers"} & set(s)


def test_tensorboard_event_files_read_back(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = _log(tmp_path, report_to=["tensorboard"])
    for m in LINES:
        log.write(RoundRecord.from_line(dict(m)))
    log.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("groups_external")] == [(0, 0.0), (1, 1.0), (2, 2.0)]
    assert [e.wall_time for e in acc.Scalars("loss")] == [1e9, 1e9 + 1, 1e9 + 2]
    assert [e.value for e in acc.Scalars("drops/dataset_mismatch")] == [0.0, 1.0, 2.0]
    assert "config/text_summary" in acc.Tags()["tensors"]  # the node's config as text
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 3  # the JSONL log is unchanged


def _wandb_records(path: Path) -> list[bytes]:
    """The records of a .wandb file: a 7-byte header, then LevelDB log blocks of 32 KiB (wandb's format)."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, out, pending = 7, 32768, [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # block trailer: padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 1:  # FULL
            out.append(chunk)
        elif kind == 2:  # FIRST
            pending = chunk
        elif kind == 3:  # MIDDLE
            pending += chunk
        elif kind == 4:  # LAST
            out.append(pending + chunk)
    return out


def test_wandb_offline_run_holds_every_round(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from wandb.proto import wandb_internal_pb2 as pb

    monkeypatch.setenv("WANDB_SILENT", "true")
    log = _log(tmp_path, report_to=["wandb"], wandb_mode="offline", wandb_project="test")
    for m in LINES:
        log.write(RoundRecord.from_line(dict(m)))
    log.close()
    (run_file,) = tmp_path.glob("wandb/offline-run-*/run-*.wandb")
    deadline = time.monotonic() + 20  # wandb's writer process may still be flushing after finish() returns
    while True:
        history, config = [], {}
        for raw in _wandb_records(run_file):
            rec = pb.Record()
            rec.ParseFromString(raw)
            if rec.WhichOneof("record_type") == "history":
                history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item})
            elif rec.WhichOneof("record_type") == "run":
                config.update({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                               for i in rec.run.config.update})
        if len(history) >= 3 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert [h["round"] for h in history] == [0, 1, 2]
    assert [h["reward_mean"] for h in history] == pytest.approx([0.0, 0.1, 0.2])
    assert history[2]["drops/dataset_mismatch"] == 2.0
    assert config["loss"] == {"name": "grpo"}
    assert (tmp_path / "wandb-run-id").read_text().strip() in run_file.name  # a resumed node reuses the run


def test_a_missing_tracker_package_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # what an environment without the extra looks like
    with pytest.raises(TrackingError, match=r"pip install 'rlswarm-node\[wandb\]'"):
        _log(tmp_path, report_to=["wandb"])
