"""`swarm` — the command line.

  swarm node --config FILE [--rounds N] [--out DIR] [--initial-peers MADDR ... | --initial-peers-file PATH|URL]
             [--identity FILE] [--host-maddrs ...] [--announce-maddrs ...] [--client-mode] [--set k=v ...]
  swarm local --nodes N --config FILE [--rounds N] [--out DIR] [--restart N] [--control] [--dashboard [PORT]]
  swarm local --samplers K --config FILE [--rounds N] [--out DIR] [--restart N]   (HeteroRL: a learner + K samplers)
  swarm bootstrap [--host-maddrs ...] [--announce-maddrs ...] [--identity FILE] [--maddrs-file FILE]
  swarm doctor [--config FILE] [network flags as for node]
  swarm models list | fetch NAME
  swarm eval --config FILE [--checkpoint DIR]
  swarm plot DIR... [--out PNG]
  swarm dashboard DIR... [--host 127.0.0.1] [--port 8050]
  swarm export RUN_DIR --out DIR [--merge]
  swarm config show --config FILE

Every user-facing failure (bad config, missing model, unreachable bootstrap peers, a port in
use, an unusable or busy --out) ends with one line on stderr and exit status 2, not a traceback.
Exit status 130 after SIGINT, 143 after SIGTERM (children stopped either way: ops.cli.lifetime),
3 when the swarm transport's DHT process or p2pd died under a running node.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from contextlib import ExitStack
from pathlib import Path

import yaml

from ops.cli.args import check_rounds, parse_sets
from ops.cli.lifetime import (
    EXIT_TERMINATED,
    Terminated,
    check_ports,
    install_signal_handlers,
    lock_out_dir,
    maddr_ports,
    prepare_out_dir,
)

EXIT_TRANSPORT_DIED = 3


def _overrides(args) -> dict:
    out = parse_sets(getattr(args, "set", None))
    from ops.cli.network import overrides as network_overrides

    out.update(network_overrides(args))  # --initial-peers(-file), --identity, --host/announce-maddrs, ...
    check_rounds(getattr(args, "rounds", None))
    if getattr(args, "rounds", None) is not None:
        out["rounds"] = args.rounds
    return out


def _node_ports(cfg) -> list[tuple[str, str, int, str]]:
    ports = []
    if cfg.metrics.prometheus_port:
        ports.append(("tcp", cfg.metrics.prometheus_host, cfg.metrics.prometheus_port, "metrics.prometheus_port"))
    if cfg.swarm.enabled:
        ports += [(proto, host, port, "swarm.host_maddrs") for proto, host, port in maddr_ports(cfg.swarm.host_maddrs)]
    return ports


def _quiet_transformers() -> None:
    from transformers.utils import (
        logging as hf_logging,  # seconds to import: after the cheap checks
    )

    hf_logging.disable_progress_bar()  # checkpoint saves would print a bar every time


def _watchdog(stack: ExitStack) -> None:
    """The orphan watchdog (ops.cli.watchdog) for as long as `stack` is open."""
    from ops.cli.watchdog import start_watchdog

    dog = start_watchdog()
    if dog is not None:
        stack.callback(dog.wait)
        stack.callback(dog.kill)  # the command ends normally: nothing left to clean up


def cmd_node(args) -> int:
    from node.config import load_config

    cfg = load_config(args.config, _overrides(args))
    if cfg.role != "full" and not cfg.swarm.enabled:  # before building the model: one line, exit 2
        from node.config import ConfigError

        raise ConfigError(f"role {cfg.role} needs a swarm: set swarm.enabled or pass --initial-peers")
    if cfg.role == "sampler" and not cfg.heterorl.follow:
        from node.config import ConfigError

        raise ConfigError("role sampler needs heterorl.follow: the learner's peer id (it prints it at start)")
    out = prepare_out_dir(Path(args.out or Path("runs") / cfg.name))
    lock_out_dir(out)  # held until this process exits
    check_ports(_node_ports(cfg))
    from node.models.device import resolve_device

    resolve_device(cfg.train.device)  # cuda asked for but absent: one line, before any network start
    _quiet_transformers()
    from node.config import precision_note, strangers_note
    from node.models.device import describe
    from node.node import Node
    from node.runner import run

    with ExitStack() as stack:  # unwinds on SIGTERM / SIGINT too (ops.cli.lifetime)
        _watchdog(stack)
        transport = None
        if cfg.swarm.enabled:
            from swarm.exchange.hivemind import HivemindTransport

            transport = HivemindTransport(cfg=cfg.swarm, start=True)
            stack.callback(transport.shutdown)  # idempotent; covers a failure while the node is built
            where = ("client mode: no listen address, bundles pushed to peers" if cfg.swarm.client_mode
                     else "listening on " + " ".join(transport.visible_maddrs()))
            print(f"[{cfg.name}] peer {transport.peer_id} {where}", flush=True)
        node = Node(cfg, out, transport=transport)
        stack.callback(node.close)
        decode = getattr(node.generator, "decode_mode", None)  # graphs, or eager and why (every metrics line too)
        print(f"[{cfg.name}] model {cfg.model.spec} on {describe(node.model, node.precision)} · decode {decode} · "
              f"loss {cfg.loss.name} · B={cfg.generation.prompts_per_round} G={cfg.generation.group_size} · "
              f"rounds {node.next_round}..{cfg.rounds - 1} ({node.start}) · out {out}", flush=True)
        print(f"[{cfg.name}] {getattr(node.generator, 'choice', cfg.generation.backend)}", flush=True)
        if node.memory_plan is not None:
            print(f"[{cfg.name}] train: {node.memory_plan.describe()}", flush=True)
        if note := strangers_note(cfg):
            print(f"[{cfg.name}] WARNING: {note}", flush=True)
        if note := precision_note(cfg):
            print(f"[{cfg.name}] WARNING: {note}", flush=True)
        run(node, cfg.rounds)
    return 0


def cmd_local(args) -> int:
    from ops.cli.local import run_local

    check_rounds(args.rounds)
    out = prepare_out_dir(Path(args.out))
    with ExitStack() as stack:
        if args.dashboard is not None:
            out.mkdir(parents=True, exist_ok=True)
            dash = start_dashboard([out], "127.0.0.1", args.dashboard, "--dashboard")
            stack.callback(print, f"dashboard stopped; `swarm dashboard {out}` shows the run again", flush=True)
            stack.callback(dash.close)
            print(f"dashboard: {dash.start().url}", flush=True)
        _watchdog(stack)
        return run_local(args)


def cmd_bootstrap(args) -> int:
    check_ports([(proto, host, port, "--host-maddrs") for proto, host, port in maddr_ports(args.host_maddrs)])
    from swarm.dht.bootstrap import run_bootstrap  # hivemind: seconds to import

    print_fn = print
    if args.maddrs_file:
        from ops.cli.network import write_peers_file

        target, lines = Path(args.maddrs_file), []

        def print_fn(*parts, **kw):  # also write the addresses as a peers file, for `--initial-peers-file`
            print(*parts, **kw)
            text = " ".join(str(p) for p in parts)
            if "/p2p/" in text and text.startswith("/"):
                lines.append(text)
                write_peers_file(target, lines, swarm_id=args.swarm_id, note="written by swarm bootstrap")

    with ExitStack() as stack:
        _watchdog(stack)
        run_bootstrap(host_maddrs=args.host_maddrs, announce_maddrs=args.announce_maddrs or [],
                      identity_path=args.identity, startup_timeout_s=args.startup_timeout,
                      swarm_id=args.swarm_id or "rlswarm", print_fn=print_fn, gossip=args.gossip)
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
    _quiet_transformers()
    node = Node(cfg, out)
    from node.books.progress import Progress

    with Progress(f"held-out eval of {cfg.name}", total=node.eval_size, unit="items") as progress:
        accuracy = node.evaluate(progress)
    print(json.dumps({"node": cfg.name, "round": node.next_round - 1,
                      "eval_accuracy": accuracy, "eval_size": cfg.tasks.eval_size}))
    return 0


def cmd_plot(args) -> int:
    from ops.cli.plot import plot_runs

    dirs = [Path(d) for d in args.dirs]
    path = plot_runs(dirs, Path(args.out) if args.out else dirs[0] / "metrics.png")
    print(path)
    return 0


def start_dashboard(dirs: list[Path], host: str, port: int, flag: str = "--port"):
    """ops.dashboard's server for `dirs` (each must exist; it may hold no rounds yet); a busy port: one line, exit 2."""
    from ops.cli.lifetime import UsageError

    for d in dirs:
        if not d.is_dir():
            raise UsageError(f"no run dir {d}")
    if not 0 <= port <= 65535:
        raise UsageError(f"{flag}: {port} is not a TCP port (0–65535)")
    check_ports([("tcp", host, port, flag)] if port else [])
    from ops.dashboard.server import Dashboard

    try:
        return Dashboard(dirs, host, port)
    except OSError as exc:  # an address this host does not have, or a port taken between the check and now
        raise UsageError(f"the dashboard cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def cmd_dashboard(args) -> int:
    dash = start_dashboard([Path(d) for d in args.dirs], args.host, args.port)
    print(f"dashboard of {' '.join(args.dirs)} on {dash.url} (read-only; Ctrl-C stops it)", flush=True)
    try:
        dash.serve_forever()
    finally:
        dash.close()
    return 0


def cmd_export(args) -> int:
    from ops.export import export

    m = export(Path(args.run_dir), Path(args.out), merge=args.merge)
    base = f" on {m['base_model']}" if m["base_model"] else ""
    print(f"{args.out}: {m['kind']} model{base}, round {m['round']} (policy v{m['policy_version']})")
    return 0


def cmd_config(args) -> int:
    from node.config import load_config

    if args.action == "doc":
        from ops.cli.config_doc import render

        print(render(), end="")
        return 0
    if not args.config:
        raise SystemExit("error: swarm config show needs --config FILE")

    cfg = load_config(args.config, _overrides(args))
    print(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), end="")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from ops.cli.doctor import add_parser as add_doctor_parser
    from ops.cli.network import add_flags

    p = argparse.ArgumentParser(prog="swarm", description="Decentralized RL swarm trainer.")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True)

    n = sub.add_parser("node", help="run one node")
    n.add_argument("--config", required=True)
    n.add_argument("--rounds", type=int, help="stop after this many rounds (overrides config)")
    n.add_argument("--out", help="metrics, logs and checkpoints go here (default runs/<name>)")
    n.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config field")
    add_flags(n)
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
    lo.add_argument("--restart", type=int, default=0, metavar="N",
                    help="restart a node that dies, up to N times (it resumes from its checkpoint); "
                    "default 0: a dying node stops the run, non-zero exit")
    lo.add_argument("--control", action="store_true",
                    help="also run a solo control: node 0's config, seed and task stream alone, training on all of "
                    "its own groups; the final table compares node 0's held-out gain with it (with one config per "
                    "node, one control per node)")
    lo.add_argument("--dashboard", type=int, nargs="?", const=8050, metavar="PORT",
                    help="serve the live dashboard of the run on http://127.0.0.1:PORT/ (default 8050) while it runs")
    lo.set_defaults(fn=cmd_local)

    b = sub.add_parser("bootstrap", help="run a DHT bootstrap peer and print its multiaddrs")
    b.add_argument("--host-maddrs", nargs="+", default=["/ip4/0.0.0.0/tcp/31337"])
    b.add_argument("--announce-maddrs", nargs="+", help="public addresses to advertise (behind NAT)")
    b.add_argument("--identity", help="identity file (stable peer id)")
    b.add_argument("--swarm-id", help="swarm namespace, written into the peers file (default: none, any swarm)")
    b.add_argument("--maddrs-file", help="also write the multiaddrs to this peers file (node --initial-peers-file)")
    b.add_argument("--startup-timeout", type=float, default=60.0)
    b.add_argument("--gossip", action=argparse.BooleanOptionalAction, default=True,
                   help="run pubsub and relay the gossiped announcements of --swarm-id (default: on, as nodes' "
                   "swarm.gossip is; --no-gossip: a DHT-only bootstrap)")
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

    da = sub.add_parser("dashboard", help="a live web page of runs: swarm plot's panels, peers, config")
    da.add_argument("dirs", nargs="+", help="run dirs (a node's, or a `swarm local` out dir; several: compared)")
    da.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    da.add_argument("--port", type=int, default=8050, help="port (default 8050; 0: any free port)")
    da.set_defaults(fn=cmd_dashboard)

    ex = sub.add_parser("export", help="the newest checkpoint as a folder transformers / peft loads")
    ex.add_argument("run_dir", help="a node's run dir (holding checkpoints/)")
    ex.add_argument("--out", required=True, help="output folder (must not exist or be empty)")
    ex.add_argument("--merge", action="store_true", help="LoRA: merge the adapter into a full model")
    ex.set_defaults(fn=cmd_export)

    add_doctor_parser(sub)

    c = sub.add_parser("config", help="show the resolved config")
    c.add_argument("action", choices=["show", "doc"], help="show: the resolved config; doc: the reference (markdown)")
    c.add_argument("--config")
    c.add_argument("--set", action="append", metavar="KEY=VALUE")
    c.set_defaults(fn=cmd_config)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    install_signal_handlers()  # SIGINT and SIGTERM unwind like Ctrl-C, so children are stopped
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.command == "models" and args.action == "fetch" and not args.name:
        print("error: swarm models fetch needs a model name (see `swarm models list`)", file=sys.stderr)
        return 2
    from ops.cli.errors import user_errors
    from swarm.host.health import TransportDied

    try:
        return args.fn(args)
    except Terminated:  # before KeyboardInterrupt, of which it is a kind
        print("terminated", file=sys.stderr)
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except user_errors() as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except TransportDied as exc:
        print(f"error: {exc}; stopping (restarting the node resumes from its last checkpoint)", file=sys.stderr)
        return EXIT_TRANSPORT_DIED


if __name__ == "__main__":
    sys.exit(main())
