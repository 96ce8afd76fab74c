"""`swarm local`: a bootstrap peer + N node processes on 127.0.0.1, one combined progress view.

Each node gets its own directory ``OUT/<node>/`` (node.log, metrics.jsonl, checkpoints). With a
learner (`--samplers K`, node.heterorl.local), the samplers run until the learner's rounds are done
and are then stopped with the rest. When one
config is given for several nodes, node i runs it with ``name=<name>-i``, ``seed=seed+i`` and
``tasks.seed=tasks.seed+i`` — its own task stream, the same held-out set (tasks.eval_seed) — so
the nodes have different groups to exchange. The run ends with a per-node table (reward and
held-out accuracy first vs last) and ``OUT/metrics.png``.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from node.config import ConfigError, NodeConfig, load_config
from node.heterorl.local import role_sets
from node.metrics import progress_line, read_metrics
from swarm.local import Child, start_bootstrap, start_node, stop_all, tail_lines


SAMPLER_ROUNDS = 10_000_000  # a sampler of a local learner runs until the learner is done


def _node_plan(args) -> list[tuple[str, str, NodeConfig, list[str]]]:
    """(name, config path, resolved config, extra CLI args) per node; validates every config first."""
    configs = list(args.config)
    samplers = getattr(args, "samplers", None)
    if samplers is not None:  # HeteroRL: node 0 learns, nodes 1..K sample (node.heterorl.local)
        if samplers < 1 or len(configs) != 1:
            raise ConfigError("--samplers takes K ≥ 1 and one --config, shared by the learner and its samplers")
        configs = configs * (1 + samplers)
    elif args.nodes < 1:
        raise ConfigError("--nodes must be at least 1")
    elif len(configs) == 1:
        configs = configs * args.nodes
    elif len(configs) != args.nodes:
        raise ConfigError(f"--config takes one file or one per node: got {len(configs)} for --nodes {args.nodes}")
    user_sets = list(args.set or [])
    threads = max(1, (os.cpu_count() or 2) // len(configs))
    bases, names, roles = [], [], []
    for i, path in enumerate(configs):
        base = load_config(path, {"rounds": args.rounds} if args.rounds else None)
        role = base.role if samplers is None else ("learner" if i == 0 else "sampler")
        name = f"{base.name}-{i}" if configs.count(path) > 1 or base.name in names else base.name
        if samplers is not None:
            name = f"{base.name}-learner" if i == 0 else f"{base.name}-sampler-{i}"
        bases.append(base)
        names.append(name)
        roles.append(role)
    hetero = role_sets(roles, names, bases, Path(args.out)) if set(roles) != {"full"} else [[] for _ in configs]
    plan = []
    for i, (path, base, name) in enumerate(zip(configs, bases, names)):
        shared = configs.count(path) > 1
        sets = [f"name={name}", "swarm.enabled=true", "metrics.console=false",
                f"swarm.start_with_peers={len(configs) - 1}"]  # start together; no lockstep after that
        if shared:
            sets += [f"seed={base.seed + i}", f"tasks.seed={base.tasks.seed + i}"]
        if base.federated is not None:  # one row of the Dirichlet split per node
            sets += [f"federated.split.client={i}", f"federated.split.clients={args.nodes}"]
        if base.torch_threads is None:
            sets.append(f"torch_threads={threads}")
        sets += hetero[i]
        rounds = args.rounds
        if roles[i] == "sampler" and "learner" in roles:  # samples as long as its learner trains
            sets.append(f"rounds={SAMPLER_ROUNDS}")
            rounds = None
        extra = [a for s in sets + user_sets for a in ("--set", s)]
        cfg = load_config(path, _as_overrides(sets + user_sets, rounds))
        plan.append((name, path, cfg, extra + (["--rounds", str(rounds)] if rounds else [])))
    return plan


def _as_overrides(sets: list[str], rounds: int | None) -> dict[str, Any]:
    import yaml

    out = {k: yaml.safe_load(v) for k, _, v in (s.partition("=") for s in sets)}
    if rounds:
        out["rounds"] = rounds
    return out


class _Tail:
    """New lines of one node's metrics.jsonl since the last call."""

    def __init__(self, path: Path):
        self.path, self.offset, self.partial = path, 0, ""

    def new(self) -> list[dict[str, Any]]:
        try:
            with open(self.path) as f:
                f.seek(self.offset)
                data = f.read()
                self.offset = f.tell()
        except FileNotFoundError:
            return []
        lines = (self.partial + data).split("\n")
        self.partial = lines.pop()
        return [json.loads(s) for s in lines if s.strip()]


def _prefetch(plan) -> None:
    """Build or fetch each built-in model once, here, before N nodes would race to build it."""
    from node.models.load import BUILTIN_MODELS, fetch

    for spec in dict.fromkeys(cfg.model.spec for _, _, cfg, _ in plan):
        if spec in BUILTIN_MODELS:
            fetch(spec)


def _sigterm_as_interrupt(*_):
    raise KeyboardInterrupt


def run_local(args) -> int:
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)  # `kill` stops the children like Ctrl-C does
    plan = _node_plan(args)
    _prefetch(plan)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sw = plan[0][2].swarm
    print(f"starting a bootstrap peer and {len(plan)} nodes on 127.0.0.1; logs under {out}/<node>/node.log",
          flush=True)
    bootstrap, maddrs = start_bootstrap(out / "bootstrap.log", startup_timeout_s=sw.startup_timeout_s,
                                        swarm_id=sw.swarm_id)
    children: list[Child] = [bootstrap]
    tails: dict[str, _Tail] = {}
    interrupted = False
    try:
        for name, path, _cfg, extra in plan:
            children.append(start_node(name, path, out / name, ["--initial-peers", *maddrs] + extra))
            tails[name] = _Tail(out / name / "metrics.jsonl")
        learners = [c for c, (_, _, cfg, _) in zip(children[1:], plan) if cfg.role == "learner"]
        nodes = learners or children[1:]  # with learners, the run ends when they do (samplers are stopped)
        while True:
            for name, tail in tails.items():
                for m in tail.new():
                    print(progress_line(m), flush=True)
            if all(c.poll() is not None for c in nodes):
                break
            time.sleep(0.5)
        for name, tail in tails.items():  # the last lines written before exit
            for m in tail.new():
                print(progress_line(m), flush=True)
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted: stopping every node (checkpoints are kept)", flush=True)
    finally:
        stopped = {c.name for c in children if c.poll() is None}  # still running: stopped by us, not failed
        stop_all(children)
    failed = [c for c in children[1:] if c.returncode not in (0, None) and c.name not in stopped and not interrupted]
    for c in failed:
        print(f"node {c.name} exited with code {c.returncode}; last lines of {c.log}:\n{tail_lines(c.log, 8)}")
    summarize(out, [name for name, *_ in plan])
    return 130 if interrupted else (1 if failed else 0)


def _mean(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def summarize(out: Path, names: list[str]) -> None:
    """Per-node table (rounds, groups used, reward and held-out accuracy first vs last) + metrics.png."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"swarm local · {out}")
    for col in ("node", "rounds", "own groups", "peer groups", "peers", "reward first→last",
                "held-out acc first→last"):
        table.add_column(col)
    dirs = []
    for name in names:
        path = out / name / "metrics.jsonl"
        rows = read_metrics(path) if path.is_file() else []
        if not rows:
            table.add_row(name, "0", "-", "-", "-", "-", "-")
            continue
        dirs.append(out / name)
        k = max(1, len(rows) // 5)  # first / last fifth of the run
        evals = [m["eval_accuracy"] for m in rows if m.get("eval_accuracy") is not None]
        first_eval = rows[0].get("eval_accuracy_before")
        first_eval = first_eval if first_eval is not None else (evals[0] if evals else None)
        peers = sorted({p for m in rows for p in m.get("external_peers", [])})
        table.add_row(
            name, str(len(rows)), str(sum(m["groups_local"] for m in rows)),
            str(sum(m["groups_external"] for m in rows)), str(len(peers)),
            f"{_fmt(_mean([m['reward_mean'] for m in rows[:k]]))} → {_fmt(_mean([m['reward_mean'] for m in rows[-k:]]))}",
            f"{_fmt(first_eval)} → {_fmt(evals[-1] if evals else None)}",
        )
    Console(width=max(110, Console().width)).print(table)
    if dirs:
        from node.cli.plot import plot_runs

        print(f"plot: {plot_runs(dirs, out / 'metrics.png')}")
