"""`swarm` — the command line.

  swarm node --config FILE [--rounds N] [--out DIR] [--initial-peers MADDR ...] [--set k=v ...]
  swarm local --nodes N --config FILE [--rounds N] [--out DIR]
  swarm local --samplers K --config FILE [--rounds N] [--out DIR]     (HeteroRL: a learner + K samplers)
  swarm bootstrap [--host-maddrs ...] [--identity FILE]
  swarm models list | fetch NAME
  swarm eval --config FILE [--checkpoint DIR]
  swarm plot DIR... [--out PNG]
  swarm export RUN_DIR --out DIR [--merge]
  swarm config show --config FILE

Every user-facing failure (bad config, missing model, unreachable bootstrap peers) ends with one
line on stderr and exit status 2, not a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from pathlib import Path

import yaml


def _overrides(args) -> dict:
    out = {}
    for item in getattr(args, "set", None) or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"error: --set expects key=value, got {item!r}")
        out[key] = yaml.safe_load(value)
    peers = list(getattr(args, "initial_peers", None) or [])
    if getattr(args, "initial_peers_file", None):
        peers += _read_peers_file(Path(args.initial_peers_file))
    if peers:
        out["swarm.initial_peers"] = peers
        out["swarm.enabled"] = True
    if getattr(args, "rounds", None):
        out["rounds"] = args.rounds
    return out


def _read_peers_file(path: Path, wait_s: float = 300.0) -> list[str]:
    """Multiaddrs written by `swarm bootstrap --maddrs-file` (waits for the file, e.g. in docker-compose)."""
    import time

    deadline = time.monotonic() + wait_s
    while not path.is_file():
        if time.monotonic() > deadline:
            raise FileNotFoundError(f"no bootstrap address file at {path} after {wait_s:.0f} s")
        time.sleep(1.0)
    peers = [line.strip() for line in path.read_text().splitlines() if "/p2p/" in line]
    if not peers:
        raise FileNotFoundError(f"{path} holds no multiaddr with /p2p/")
    return peers


def cmd_node(args) -> int:
    from node.config import load_config
    from node.node import Node
    from node.runner import run

    cfg = load_config(args.config, _overrides(args))
    out = Path(args.out or Path("runs") / cfg.name)
    transport = None
    if cfg.swarm.enabled:
        from swarm.hivemind_transport import HivemindTransport

        transport = HivemindTransport(cfg=cfg.swarm, start=True)
        print(f"[{cfg.name}] peer {transport.peer_id} listening on {' '.join(transport.visible_maddrs())}", flush=True)
    node = Node(cfg, out, transport=transport)
    try:
        print(f"[{cfg.name}] model {cfg.model.spec} · loss {cfg.loss.name} · "
              f"B={cfg.generation.prompts_per_round} G={cfg.generation.group_size} · "
              f"rounds {node.next_round}..{cfg.rounds - 1} · out {out}", flush=True)
        run(node, cfg.rounds)
    finally:
        node.close()
    return 0


def cmd_local(args) -> int:
    from node.cli.local import run_local

    return run_local(args)


def cmd_bootstrap(args) -> int:
    from swarm.bootstrap import run_bootstrap

    print_fn = print
    if args.maddrs_file:
        target, lines = Path(args.maddrs_file), []

        def print_fn(*parts, **kw):  # also write the addresses, atomically, for `--initial-peers-file`
            print(*parts, **kw)
            text = " ".join(str(p) for p in parts)
            if "/p2p/" in text and text.startswith("/"):
                lines.append(text)
                tmp = target.with_suffix(".tmp")
                tmp.write_text("\n".join(lines) + "\n")
                os.replace(tmp, target)

    run_bootstrap(host_maddrs=args.host_maddrs, announce_maddrs=args.announce_maddrs or [],
                  identity_path=args.identity, startup_timeout_s=args.startup_timeout, swarm_id=args.swarm_id,
                  print_fn=print_fn)
    return 0


def cmd_models(args) -> int:
    from node.models import load as models

    if args.action == "list":
        for alias, desc in models.BUILTIN_MODELS.items():
            print(f"{alias:<16} {desc}")
        return 0
    path = models.fetch(args.name)
    print(path)
    return 0


def cmd_eval(args) -> int:
    from node.config import load_config
    from node.node import Node

    overrides = _overrides(args)
    overrides.update({"metrics.console": False, "swarm.enabled": False})
    cfg = load_config(args.config, overrides)
    out = Path(args.out or Path("runs") / cfg.name)
    node = Node(cfg, out)
    print(json.dumps({"node": cfg.name, "round": node.next_round - 1,
                      "eval_accuracy": node.evaluate(), "eval_size": cfg.tasks.eval_size}))
    return 0


def cmd_plot(args) -> int:
    from node.cli.plot import plot_runs

    dirs = [Path(d) for d in args.dirs]
    path = plot_runs(dirs, Path(args.out) if args.out else dirs[0] / "metrics.png")
    print(path)
    return 0


def cmd_export(args) -> int:
    from node.export import export

    m = export(Path(args.run_dir), Path(args.out), merge=args.merge)
    base = f" on {m['base_model']}" if m["base_model"] else ""
    print(f"{args.out}: {m['kind']} model{base}, round {m['round']} (policy v{m['policy_version']})")
    return 0


def cmd_config(args) -> int:
    from node.config import load_config

    if args.action == "doc":
        from node.cli.config_doc import render

        print(render(), end="")
        return 0
    if not args.config:
        raise SystemExit("error: swarm config show needs --config FILE")

    cfg = load_config(args.config, _overrides(args))
    print(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), end="")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="swarm", description="Decentralized RL swarm trainer.")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True)

    n = sub.add_parser("node", help="run one node")
    n.add_argument("--config", required=True)
    n.add_argument("--rounds", type=int, help="stop after this many rounds (overrides config)")
    n.add_argument("--out", help="metrics, logs and checkpoints go here (default runs/<name>)")
    n.add_argument("--initial-peers", nargs="+", help="bootstrap multiaddrs; enables the swarm")
    n.add_argument("--initial-peers-file", help="read bootstrap multiaddrs from this file (waits for it)")
    n.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config field")
    n.set_defaults(fn=cmd_node)

    lo = sub.add_parser("local", help="launch a bootstrap + N nodes on 127.0.0.1")
    lo.add_argument("--nodes", type=int, default=2)
    lo.add_argument("--config", required=True, nargs="+",
                    help="one config for all nodes, or one per node")
    lo.add_argument("--samplers", type=int, metavar="K",
                    help="HeteroRL: one learner and K samplers that follow it, all from the one --config "
                         "(instead of --nodes)")
    lo.add_argument("--rounds", type=int)
    lo.add_argument("--out", default="runs/local")
    lo.add_argument("--set", action="append", metavar="KEY=VALUE")
    lo.set_defaults(fn=cmd_local)

    b = sub.add_parser("bootstrap", help="run a DHT bootstrap peer and print its multiaddrs")
    b.add_argument("--host-maddrs", nargs="+", default=["/ip4/0.0.0.0/tcp/31337"])
    b.add_argument("--announce-maddrs", nargs="+", help="public addresses to advertise (behind NAT)")
    b.add_argument("--identity", help="identity file (stable peer id)")
    b.add_argument("--swarm-id", default="rlswarm", help="swarm namespace (must match the nodes')")
    b.add_argument("--maddrs-file", help="also write the multiaddrs to this file (see node --initial-peers-file)")
    b.add_argument("--startup-timeout", type=float, default=60.0)
    b.set_defaults(fn=cmd_bootstrap)

    m = sub.add_parser("models", help="built-in models")
    m.add_argument("action", choices=["list", "fetch"])
    m.add_argument("name", nargs="?")
    m.set_defaults(fn=cmd_models)

    e = sub.add_parser("eval", help="held-out accuracy of a config's model (or its last checkpoint)")
    e.add_argument("--config", required=True)
    e.add_argument("--out", help="run dir whose checkpoint to load (default runs/<name>)")
    e.add_argument("--set", action="append", metavar="KEY=VALUE")
    e.set_defaults(fn=cmd_eval)

    pl = sub.add_parser("plot", help="PNG of reward, accuracy, held-out accuracy, loss, KL and groups per round")
    pl.add_argument("dirs", nargs="+", help="run dirs holding metrics.jsonl (several: one figure, compared)")
    pl.add_argument("--out", help="PNG path (default: metrics.png in the first run dir)")
    pl.set_defaults(fn=cmd_plot)

    ex = sub.add_parser("export", help="the newest checkpoint as a folder transformers / peft loads")
    ex.add_argument("run_dir", help="a node's run dir (holding checkpoints/)")
    ex.add_argument("--out", required=True, help="output folder (must not exist or be empty)")
    ex.add_argument("--merge", action="store_true", help="LoRA: merge the adapter into a full model")
    ex.set_defaults(fn=cmd_export)

    c = sub.add_parser("config", help="show the resolved config")
    c.add_argument("action", choices=["show", "doc"], help="show: the resolved config; doc: the reference (markdown)")
    c.add_argument("--config")
    c.add_argument("--set", action="append", metavar="KEY=VALUE")
    c.set_defaults(fn=cmd_config)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # A shell script that starts us with `&` leaves SIGINT ignored, and Python then never raises
    # KeyboardInterrupt; Ctrl-C and the SIGINT `swarm local` sends its nodes must still stop us.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.command in ("node", "eval"):
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # checkpoint saves would print a bar every time
    if args.command == "models" and args.action == "fetch" and not args.name:
        print("error: swarm models fetch needs a model name (see `swarm models list`)", file=sys.stderr)
        return 2
    from node.cli.errors import user_errors

    try:
        return args.fn(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except user_errors() as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
