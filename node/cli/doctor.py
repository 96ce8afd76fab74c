"""`swarm doctor`: a checklist of whether this machine can join the swarm, and what to fix (swarm/doctor.py).

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
    from node.cli import network

    d = sub.add_parser("doctor", help="check that this machine can join the swarm: bootstrap, reachability, "
                       "clock, swarm id and protocol; says what to fix")
    d.add_argument("--config", help="a node config (its swarm section is used); default: swarm defaults + flags")
    d.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config field (swarm.*)")
    d.add_argument("--listen", type=float, default=15.0, metavar="S",
                   help="seconds to listen for the swarm's announcements (default 15)")
    network.add_flags(d)
    d.set_defaults(fn=cmd_doctor)


def swarm_config(args):
    """The SwarmConfig doctor checks: the node config's swarm section, or defaults, with the flags applied."""
    from node.cli import network
    from node.config import ConfigError, load_config
    from swarm.config import SwarmConfig

    overrides = {}
    for item in args.set or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects key=value, got {item!r}")
        overrides[key] = yaml.safe_load(value)
    overrides.update(network.overrides(args))
    if args.config:
        return load_config(args.config, overrides).swarm
    data: dict = {}
    for key, value in overrides.items():
        if not key.startswith("swarm."):
            raise ConfigError(f"without --config only swarm.* fields can be set, not {key}")
        data[key.removeprefix("swarm.")] = value
    try:
        return SwarmConfig(**{k: v for k, v in data.items() if "." not in k})
    except ValueError as exc:
        first = getattr(exc, "errors", lambda: [{"loc": (), "msg": str(exc)}])()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"swarm.{where}: {first['msg'].removeprefix('Value error, ')}") from None


def cmd_doctor(args) -> int:
    from swarm.doctor import diagnose

    cfg = swarm_config(args)
    print(f"swarm doctor · swarm {cfg.swarm_id!r} · protocol v2 · window {cfg.window_s:g} s · {cfg.shards} shards"
          + (" · client mode" if cfg.client_mode else ""), flush=True)
    checks = diagnose(cfg, listen_s=args.listen)
    width = max(len(c.name) for c in checks)
    for c in checks:
        print(f"  {MARKS[c.status]} {c.name:<{width}}  {c.detail}")
        if c.fix and c.status != "ok":
            print(f"    {'':<{width}}  fix: {c.fix}")
    failed = sum(c.status == "fail" for c in checks)
    print("all checks passed" if not failed else f"{failed} check(s) failed", flush=True)
    sys.stdout.flush()
    return 1 if failed else 0
