"""`swarm doctor`: a checklist of whether this machine can join the swarm, and what to fix (swarm/host/doctor.py).

    swarm doctor --config examples/gpu-workstation.yaml --initial-peers-file peers.txt
    swarm doctor --initial-peers-file https://…/peers.txt --identity node.key --host-maddrs /ip4/0.0.0.0/tcp/31337 \\
                 --announce-maddrs /ip4/<public IP>/tcp/31337

Without --config the swarm fields come from the flags and `--set swarm.…=…` alone. Exit 0 when no
check fails, 1 when one does, 2 for a bad config or flag (one line, like every command).
"""

from __future__ import annotations

import sys

import yaml

MARKS = {"ok": "✓", "warn": "!", "fail": "✗"}


def add_parser(sub) -> None:
    from ops.cli.network import add_flags

    d = sub.add_parser("doctor", help="check that this machine can join the swarm: bootstrap, reachability, "
                       "clock, swarm id and protocol; says what to fix")
    d.add_argument("--config", help="a node config (its swarm section is used); default: swarm defaults + flags")
    d.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config field (swarm.*)")
    d.add_argument("--listen", type=float, default=15.0, metavar="S",
                   help="seconds to listen for the swarm's announcements (default 15)")
    add_flags(d)
    d.set_defaults(fn=cmd_doctor)


def _overrides(args) -> dict:
    from node.config import ConfigError
    from ops.cli.network import overrides as network_overrides

    overrides = {}
    for item in args.set or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects key=value, got {item!r}")
        overrides[key] = yaml.safe_load(value)
    return {**overrides, **network_overrides(args)}


def configs(args):
    """(node config or None, the SwarmConfig doctor checks): the node config's swarm section, or the swarm
    defaults, with the flags and `--set swarm.…` applied."""
    from pydantic import ValidationError

    from node.config import ConfigError, load_config
    from swarm.config import SwarmConfig

    overrides = _overrides(args)
    if args.config:
        cfg = load_config(args.config, overrides)
        return cfg, cfg.swarm
    data: dict = {}
    for key, value in overrides.items():
        if not key.startswith("swarm."):
            raise ConfigError(f"without --config only swarm.* fields can be set, not {key}")
        data[key.removeprefix("swarm.")] = value
    try:
        return None, SwarmConfig(**{k: v for k, v in data.items() if "." not in k})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"swarm.{where}: {first['msg'].removeprefix('Value error, ')}") from None


def suggest_model(vram_gb: float | None) -> str:
    """A config for this hardware (free GPU memory in GB, None = no GPU), as the command to run."""
    if vram_gb is None or vram_gb < 10:
        return "examples/smollm2-swarm.yaml (SmolLM2-135M + LoRA on the CPU)" + (
            "" if vram_gb is None else f"; {vram_gb:.0f} GB of GPU memory is too little for vLLM beside training")
    if vram_gb < 20:
        return "examples/gpu-workstation.yaml --set model.spec=Qwen/Qwen2.5-0.5B-Instruct (≈ 8 GB of GPU memory)"
    return "examples/gpu-workstation.yaml (Qwen2.5-1.5B-Instruct + LoRA, vLLM: ≈ 16 GB of GPU memory)"


def device_check(node_cfg):
    """The config's train.device on this machine, and a model sized for its GPU (swarm.host.doctor.Check)."""
    import torch

    from node.models.device import DeviceUnavailable, resolve_device
    from swarm.host.doctor import Check

    vram = None
    if torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info(0)
        vram = free / 1e9
    hw = (f"{torch.cuda.get_device_name(0)}, {vram:.1f} GB free" if vram is not None
          else f"no CUDA GPU (torch {torch.__version__})")
    advice = f"for this hardware: swarm node --config {suggest_model(vram)}"
    if node_cfg is None:
        return Check("device", "ok", f"{hw}; {advice}")
    try:
        device = resolve_device(node_cfg.train.device)
    except DeviceUnavailable as exc:
        return Check("device", "fail", str(exc), advice)
    return Check("device", "ok", f"train.device {node_cfg.train.device} → {device} ({hw})")


def strangers_check(node_cfg):
    """Whether the node trains on peers' rows without a defence against taught text (node.config.strangers_note)."""
    from node.config import strangers_note
    from swarm.host.doctor import Check

    note = strangers_note(node_cfg)
    if note is None:
        floor = node_cfg.train.peer_token_floor
        return Check("strangers", "ok", f"train.peer_token_floor {floor:g}" if floor else "takes no peers' rows")
    return Check("strangers", "warn", note, "--set train.peer_token_floor=0.01, or join only peers you trust")


def cmd_doctor(args) -> int:
    from swarm.host.doctor import diagnose

    node_cfg, cfg = configs(args)
    print(f"swarm doctor · swarm {cfg.swarm_id!r} · protocol v2 · window {cfg.window_s:g} s · {cfg.shards} shards"
          + (" · client mode" if cfg.client_mode else ""), flush=True)
    checks = [device_check(node_cfg)] + ([strangers_check(node_cfg)] if node_cfg is not None else []) + \
        diagnose(cfg, listen_s=args.listen)
    width = max(len(c.name) for c in checks)
    for c in checks:
        print(f"  {MARKS[c.status]} {c.name:<{width}}  {c.detail}")
        if c.fix and c.status != "ok":
            print(f"    {'':<{width}}  fix: {c.fix}")
    failed = sum(c.status == "fail" for c in checks)
    print("all checks passed" if not failed else f"{failed} check(s) failed", flush=True)
    sys.stdout.flush()
    return 1 if failed else 0
