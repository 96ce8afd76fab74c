"""`swarm doctor`'s verdicts without a network: clock thresholds, private addresses, the device and the model
suggested for this hardware, and how flags become the config it checks."""

from __future__ import annotations

import argparse

import pytest

from node.config import ConfigError
from ops.cli import doctor
from swarm.host.doctor import CLOCK_TOLERANCE_S, _clock_check, _private

BOOT = "/ip4/127.0.0.1/tcp/31337/p2p/QmbootstrapPeerId1"


def test_clock_verdicts():
    assert _clock_check([0.01, -0.02, 0.0], 3).status == "ok"
    skewed = _clock_check([CLOCK_TOLERANCE_S + 30] * 3, 3)
    assert skewed.status == "fail" and "+35.00 s" in skewed.detail and "NTP" in skewed.fix
    assert _clock_check([], 2).status == "warn"


@pytest.mark.parametrize("maddr,private", [
    ("/ip4/127.0.0.1/tcp/1", True), ("/ip4/192.168.1.20/tcp/1", True), ("/ip4/10.0.0.2/tcp/1", True),
    ("/ip4/0.0.0.0/tcp/1", True), ("/ip6/::1/tcp/1", True), ("/dns4/localhost/tcp/1", True),
    ("/ip4/8.8.8.8/tcp/1", False), ("/dns4/boot.my-project.org/tcp/1", False)])
def test_private_addresses(maddr, private):
    assert _private(maddr) is private


def test_suggested_model_by_gpu_memory():
    assert doctor.suggest_model(None).startswith("examples/smollm2-swarm.yaml")
    assert doctor.suggest_model(6.0).startswith("examples/smollm2-swarm.yaml")
    assert "Qwen2.5-0.5B" in doctor.suggest_model(15.0)
    assert doctor.suggest_model(23.5) == "examples/gpu-workstation.yaml (Qwen2.5-1.5B-Instruct + LoRA, vLLM: ≈ 16 GB of GPU memory)"


def _args(*argv: str):
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="command")
    doctor.add_parser(sub)
    return p.parse_args(["doctor", *argv])


def test_device_check_on_this_machine(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    node_cfg, _ = doctor.configs(_args("--config", "examples/gpu-workstation.yaml", "--initial-peers", BOOT))
    check = doctor.device_check(node_cfg)
    assert check.status == "fail" and "torch sees no CUDA device" in check.detail
    assert "examples/smollm2-swarm.yaml" in check.fix
    ok = doctor.device_check(doctor.configs(_args("--config", "examples/tiny-solo.yaml"))[0])
    assert ok.status == "ok" and "train.device auto → cpu" in ok.detail
    assert doctor.device_check(None).status == "ok"


def test_flags_become_the_checked_swarm_config():
    node_cfg, cfg = doctor.configs(_args("--initial-peers", BOOT, "--client-mode", "--set", "swarm.window_s=20"))
    assert node_cfg is None and cfg.client_mode and cfg.window_s == 20 and cfg.initial_peers == [BOOT]
    with pytest.raises(ConfigError, match="only swarm.\\* fields"):
        doctor.configs(_args("--set", "train.lr=0.1"))
    with pytest.raises(ConfigError, match="swarm.window_s"):
        doctor.configs(_args("--set", "swarm.window_s=0"))


def test_a_node_that_trains_on_strangers_rows_without_a_floor_is_warned_at_start_and_by_doctor():
    from node.config import load_config, strangers_note
    from ops.cli.doctor import strangers_check

    shared = load_config("examples/lab-swarm.yaml")
    assert shared.swarm.enabled and shared.select.external_groups > 0 and shared.train.peer_token_floor == 0
    assert "peer_token_floor" in strangers_note(shared) and strangers_check(shared).status == "warn"
    floored = load_config("examples/lab-swarm.yaml", {"train.peer_token_floor": 0.01})
    assert strangers_note(floored) is None and strangers_check(floored).status == "ok"
    alone = load_config("examples/lab-swarm.yaml", {"select.external_groups": 0})
    assert strangers_note(alone) is None
    offline = load_config("examples/lab-solo.yaml")
    assert strangers_note(offline) is None and strangers_check(offline).detail == "takes no peers' rows"
