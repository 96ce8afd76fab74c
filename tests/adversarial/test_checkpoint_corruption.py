"""Finding 6: a corrupt newest checkpoint is reported and the previous good one is used.

Each corruption kind is applied to the newest of two checkpoints; `restore` must load the older
one bit-exactly and say which one it refused. Before manifests, a flipped weight byte loaded
silently and a truncated file, a missing file or a broken state.json raised a traceback.
"""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import pytest
import torch

from node.books import checkpoint


def _flip(path: Path, offset: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    i = len(data) // 2 if offset is None else offset
    data[i] ^= 0x01  # one bit: the smallest corruption
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


CORRUPTIONS = {
    "truncated_weights": lambda d: _truncate(d / "model" / "model.safetensors"),
    "flipped_weight_byte": lambda d: _flip(d / "model" / "model.safetensors",
                                           (d / "model" / "model.safetensors").stat().st_size - 17),
    "missing_weights": lambda d: (d / "model" / "model.safetensors").unlink(),
    "missing_optimizer": lambda d: (d / "optimizer.pt").unlink(),
    "flipped_optimizer_byte": lambda d: _flip(d / "optimizer.pt"),
    "truncated_optimizer": lambda d: _truncate(d / "optimizer.pt"),
    "state_json_not_json": lambda d: (d / "state.json").write_text("{\"round\": 1, \"policy"),
    "state_json_edited": lambda d: (d / "state.json").write_text(
        (d / "state.json").read_text().replace('"policy_version": 1', '"policy_version": 7')),
    "missing_state_json": lambda d: (d / "state.json").unlink(),
    "manifest_not_json": lambda d: (d / "manifest.json").write_text("{"),
    "missing_config_json": lambda d: (d / "model" / "config.json").unlink(),
}


def _model_and_opt(tiny_qwen):
    lm = copy.deepcopy(tiny_qwen)
    return lm, torch.optim.AdamW(lm.model.parameters(), lr=1e-2)


def _step(model, opt):
    loss = sum(p.float().pow(2).sum() for p in model.parameters())
    loss.backward()
    opt.step()
    opt.zero_grad()


def _two_checkpoints(tmp_path, tiny_qwen):
    lm, opt = _model_and_opt(tiny_qwen)
    snapshots = []
    for r in range(2):
        _step(lm.model, opt)
        checkpoint.save(tmp_path, model=lm.model, tokenizer=lm.tokenizer, optimizer=opt, round_=r,
                        policy_version=r, keep=3)
        snapshots.append({k: v.clone() for k, v in lm.model.state_dict().items()})
    return lm, snapshots


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_corrupt_newest_falls_back_to_the_previous(tmp_path, tiny_qwen, kind, caplog):
    _, snapshots = _two_checkpoints(tmp_path, tiny_qwen)
    CORRUPTIONS[kind](tmp_path / "round-00000001")
    fresh, opt = _model_and_opt(tiny_qwen)
    with caplog.at_level(logging.WARNING, logger="node.books.checkpoint"):
        restored = checkpoint.restore(tmp_path, model=fresh.model, optimizer=opt)
    assert restored is not None and (restored.round, restored.policy_version) == (0, 0)
    for k, v in fresh.model.state_dict().items():
        torch.testing.assert_close(v, snapshots[0][k], rtol=0, atol=0)
    assert opt.state_dict()["state"][0]["step"] == 1  # round 0's optimizer, not a fresh one
    assert any("round-00000001" in r.getMessage() and "unusable" in r.getMessage() for r in caplog.records)


def test_every_checkpoint_corrupt_is_one_clear_error_and_loads_nothing(tmp_path, tiny_qwen):
    _two_checkpoints(tmp_path, tiny_qwen)
    for r in range(2):
        _flip(tmp_path / f"round-0000000{r}" / "model" / "model.safetensors")
    fresh, opt = _model_and_opt(tiny_qwen)
    before = {k: v.clone() for k, v in fresh.model.state_dict().items()}
    with pytest.raises(checkpoint.CheckpointError) as exc:
        checkpoint.restore(tmp_path, model=fresh.model, optimizer=opt)
    msg = str(exc.value)
    assert "\n" not in msg and "round-00000000" in msg and "round-00000001" in msg and "sha256" in msg
    for k, v in fresh.model.state_dict().items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)


def test_manifest_covers_every_file_and_a_clean_checkpoint_verifies(tmp_path, tiny_qwen):
    _two_checkpoints(tmp_path, tiny_qwen)
    newest = tmp_path / "round-00000001"
    listed = set(json.loads((newest / "manifest.json").read_text())["files"])
    on_disk = {str(p.relative_to(newest)) for p in newest.rglob("*") if p.is_file()} - {"manifest.json"}
    assert listed == on_disk and "state.json" in listed and "model/model.safetensors" in listed
    assert checkpoint.verify(newest)["round"] == 1


@pytest.mark.integration
def test_swarm_node_restarts_from_the_previous_checkpoint_or_says_why_not(tmp_path):
    """The finding as a user meets it: a flipped weight byte in the newest checkpoint loaded silently
    (and was checkpointed again); a truncated one crashed every restart with a traceback."""
    import json as _json

    from tests.adversarial.procs import cli

    out = tmp_path / "run"
    args = ["node", "--config", "examples/tiny-solo.yaml", "--out", str(out), "--set", "eval.every=0",
            "--set", "checkpoint.keep=3"]
    first = cli(*args, "--rounds", "2")
    assert first.returncode == 0, first.stderr
    _flip(out / "checkpoints" / "round-00000001" / "model" / "model.safetensors",
          (out / "checkpoints" / "round-00000001" / "model" / "model.safetensors").stat().st_size - 17)
    again = cli(*args, "--rounds", "3")
    assert again.returncode == 0, again.stderr
    assert "round-00000001 is unusable" in again.stderr and "sha256" in again.stderr
    rows = [_json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    # round 1 is run again from round 0's checkpoint: its first line, written after that checkpoint, is replaced
    assert [(m["round"], m.get("resumed", False)) for m in rows] == [(0, False), (1, True), (2, False)]
    for r in range(3):
        _truncate(out / "checkpoints" / f"round-0000000{r}" / "optimizer.pt")
    broken = cli(*args, "--rounds", "4")
    assert broken.returncode == 2 and "Traceback" not in broken.stderr, broken.stderr
    lines = broken.stderr.strip().splitlines()  # one warning per refused checkpoint, then the error
    assert len(lines) == 4 and lines[-1].startswith("error: no usable checkpoint"), broken.stderr
