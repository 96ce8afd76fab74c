"""`swarm local`: a bootstrap peer + N node processes on 127.0.0.1, one combined progress view.

Each node gets its own directory ``OUT/<node>/`` (node.log, metrics.jsonl, checkpoints). With a
learner (`--samplers K`, node.heterorl.local), the samplers run until the learner's rounds are done
and are then stopped (status "stopped (the others done)", not a failure); so does a teacher that only serves
scores (`distill.serve`) beside a student that asks it (`distill.teachers`). When one config is given for several nodes, node i runs it with ``name=<name>-i``, ``seed=seed+i`` and
``tasks.seed=tasks.seed+i`` — its own task stream, the same held-out set (tasks.eval_seed) — so
the nodes have different groups to exchange. With `metrics.prometheus_port` set, node i serves
/metrics on that port + i (printed at start). A node that dies stops the run at once: its last log
lines are printed, the other nodes stopped, the exit status is non-zero (`--restart N` restarts it
instead, up to N times, resuming from its checkpoint). The run ends with a per-node table (how it
ended, reward and held-out accuracy first vs last) and ``OUT/metrics.png``.

`--control` adds a solo control node ``<name>-solo``: node 0's config, seed and task stream, the same
groups generated per round, no swarm, training on all of its own groups (I + J own, no peers'). The
final table then sets node 0 against it on the same held-out items: what the swarm gave node 0. With
one config per node (heterogeneous pairs) every node gets its own control, and every node is set
against it.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from ops.cli.args import parse_sets
from node.config import ConfigError, NodeConfig, load_config
from node.heterorl.local import role_sets
from node.books.metrics import progress_line
from node.round.record import RoundRecord, read_records
from swarm.host.local import Child, start_bootstrap, start_node, stop_all, tail_lines


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
        base = load_config(path, {"rounds": args.rounds} if args.rounds is not None else None)
        role = base.role if samplers is None else ("learner" if i == 0 else "sampler")
        name = f"{base.name}-{i}" if configs.count(path) > 1 or base.name in names else base.name
        if samplers is not None:
            name = f"{base.name}-learner" if i == 0 else f"{base.name}-sampler-{i}"
        bases.append(base)
        names.append(name)
        roles.append(role)
    hetero = role_sets(roles, names, bases, Path(args.out)) if set(roles) != {"full"} else [[] for _ in configs]
    teachers = teacher_sets(bases, names, user_sets, Path(args.out))
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
        if roles[i] == "sampler" and "learner" in roles or _serves_only(base, bases):  # as long as others need it
            sets.append(f"rounds={SAMPLER_ROUNDS}")
            rounds = None
        sets_i = sets + user_sets + teachers[i]  # after the user's: the peer ids of `node:<name>` teachers
        extra = [a for s in sets_i for a in ("--set", s)]
        cfg = load_config(path, _as_overrides(sets_i, rounds))
        plan.append((name, path, cfg, extra + (["--rounds", str(rounds)] if rounds is not None else [])))
    if getattr(args, "control", False):  # one config: node 0's control; one per node: each node's
        nodes = range(len(configs)) if len(set(configs)) > 1 else [0]
        plan += [_control(args, configs[i], bases[i], names[i] if len(nodes) > 1 else bases[0].name, user_sets,
                          len(configs) + len(nodes)) for i in nodes]
    return plan


def teacher_sets(bases: list[NodeConfig], names: list[str], user_sets: list[str], out: Path) -> list[list[str]]:
    """Per node, the --set items that make `distill.teachers: [node:<name>]` the peer id of that node of this run:
    the named node gets an identity file (its config's `swarm.identity_path`, else OUT/<name>/identity.key, created
    now) so its peer id is known before it starts, and the student its id. A name no node of the run has is a
    ConfigError."""
    override = parse_sets(user_sets).get("distill.teachers")
    wanted = [list(override) if isinstance(override, list) else b.distill.teachers for b in bases]
    local = {t.removeprefix("node:") for ts in wanted for t in ts if t.startswith("node:")}
    out_sets: list[list[str]] = [[] for _ in bases]
    if not local:
        return out_sets
    from swarm.net.identity import load_or_create_identity, peer_id_of_key  # hivemind: only when needed

    ids = {}
    for name in sorted(local):
        if name not in names:
            raise ConfigError(f"distill.teachers: node:{name} names no node of this run (its nodes: {', '.join(names)})")
        j = names.index(name)
        path = Path(bases[j].swarm.identity_path or out / name / "identity.key")
        path.parent.mkdir(parents=True, exist_ok=True)
        ids[name] = peer_id_of_key(load_or_create_identity(path)[0])
        out_sets[j].append(f"swarm.identity_path={path}")
    for i, ts in enumerate(wanted):
        if any(t.startswith("node:") for t in ts):
            resolved = [ids[t.removeprefix("node:")] if t.startswith("node:") else t for t in ts]
            out_sets[i].append(f"distill.teachers=[{', '.join(resolved)}]")
    return out_sets


def _serves_only(base: NodeConfig, bases: list[NodeConfig]) -> bool:
    """A teacher (distill.serve) that asks no teacher itself, in a run with a student: it runs until the others
    are done (its rounds only keep its records, and so its address, fresh)."""
    return base.distill.serve and not base.distill.teachers and any(b.distill.teachers for b in bases)


def _control(args, path: str, base: NodeConfig, name: str, user_sets: list[str],
             processes: int) -> tuple[str, str, NodeConfig, list[str]]:
    """The solo control of the node `name` runs (config `path`): its seed and task stream, no swarm (and so no
    teacher to distill from), all of its own groups trained."""
    if getattr(args, "samplers", None) is not None or base.federated is not None:
        raise ConfigError("--control compares a sampling-and-training node with one alone: not with --samplers "
                          "or a federated config")
    sel = base.select
    sets = [f"name={name}-solo", "swarm.enabled=false", "metrics.console=false", f"seed={base.seed}",
            f"tasks.seed={base.tasks.seed}", f"select.local_groups={sel.local_groups + sel.external_groups}",
            "select.external_groups=0", "distill.teachers=[]", "distill.serve=false"]  # alone: no teacher either
    if base.torch_threads is None:
        sets.append(f"torch_threads={max(1, (os.cpu_count() or 2) // processes)}")
    sets += user_sets
    cfg = load_config(path, _as_overrides(sets, args.rounds))
    extra = [a for s in sets for a in ("--set", s)] + (["--rounds", str(args.rounds)] if args.rounds is not None else [])
    return f"{name}-solo", path, cfg, extra


def _start(name: str, path: str, cfg: NodeConfig, out: Path, maddrs: list[str], extra: list[str]) -> Child:
    """One node process; a node without a swarm (the solo control) is given no bootstrap peers."""
    return start_node(name, path, out / name, (["--initial-peers", *maddrs] if cfg.swarm.enabled else []) + extra)


def _as_overrides(sets: list[str], rounds: int | None) -> dict[str, Any]:
    out = parse_sets(sets)
    if rounds is not None:
        out["rounds"] = rounds
    return out


class _Tail:
    """New lines of one node's metrics.jsonl since the last call."""

    def __init__(self, path: Path):
        self.path, self.offset, self.partial = path, 0, ""

    def new(self) -> list[RoundRecord]:
        try:
            with open(self.path) as f:
                f.seek(self.offset)
                data = f.read()
                self.offset = f.tell()
        except FileNotFoundError:
            return []
        lines = (self.partial + data).split("\n")
        self.partial = lines.pop()
        return [RoundRecord.from_line(json.loads(s)) for s in lines if s.strip()]


def _prefetch(plan) -> None:
    """Build or fetch each built-in model once, here, before N nodes would race to build it."""
    from node.models.load import BUILTIN_MODELS, fetch

    for spec in dict.fromkeys(cfg.model.spec for _, _, cfg, _ in plan):
        if spec in BUILTIN_MODELS:
            fetch(spec)


def _sigterm_as_interrupt(*_):
    raise KeyboardInterrupt


def _ports(plan) -> list[tuple[str, str, NodeConfig, list[str]]]:
    """Node i serves /metrics on its config's metrics.prometheus_port + i (0 stays 0: a free port each)."""
    out = []
    for i, (name, path, cfg, extra) in enumerate(plan):
        port = cfg.metrics.prometheus_port
        if port:
            port += i
            extra = extra + ["--set", f"metrics.prometheus_port={port}"]
            cfg = cfg.model_copy(update={"metrics": cfg.metrics.model_copy(update={"prometheus_port": port})})
        out.append((name, path, cfg, extra))
    return out


def run_local(args) -> int:
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)  # `kill` stops the children like Ctrl-C does
    plan = _ports(_node_plan(args))
    _prefetch(plan)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sw = plan[0][2].swarm
    print(f"starting a bootstrap peer and {len(plan)} nodes on 127.0.0.1; logs under {out}/<node>/node.log",
          flush=True)
    for name, _, cfg, _ in plan:
        if cfg.metrics.prometheus_port is not None:
            print(f"  {name}: metrics on http://{cfg.metrics.prometheus_host}:{cfg.metrics.prometheus_port}/metrics",
                  flush=True)
    bootstrap, maddrs = start_bootstrap(out / "bootstrap.log", startup_timeout_s=sw.startup_timeout_s,
                                        swarm_id=sw.swarm_id, gossip=any(cfg.swarm.gossip for _, _, cfg, _ in plan))
    children: list[Child] = [bootstrap]
    status: dict[str, str] = {}
    interrupted, failed = False, None
    try:
        nodes = {name: _start(name, path, cfg, out, maddrs, extra) for name, path, cfg, extra in plan}
        children += nodes.values()
        failed = _supervise(bootstrap, nodes, plan, out, maddrs, getattr(args, "restart", 0), status, children)
        for name, c in nodes.items():
            if c.poll() is None:  # a sampler after its learners finished, or anything after a failure
                status[name] = "stopped" if failed else "stopped (the others done)"
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted: stopping every node (checkpoints are kept)", flush=True)
    finally:
        stop_all(children)
    latest = {c.name: c for c in children[1:]}  # a restarted node: its last process
    for name, c in latest.items():
        status.setdefault(name, "interrupted" if interrupted else "done" if c.returncode == 0 else f"exit {c.returncode}")
    solos = [name for name, _, cfg, _ in plan if getattr(args, "control", False) and not cfg.swarm.enabled]
    summarize(out, [name for name, *_ in plan], status, controls=list(zip([name for name, *_ in plan], solos)))
    return 130 if interrupted else (1 if failed else 0)


def _supervise(bootstrap: Child, nodes: dict[str, Child], plan, out: Path, maddrs: list[str], restarts: int,
               status: dict[str, str], children: list[Child]) -> str | None:
    """Print progress until every node has exited; a node (or the bootstrap) that dies with a non-zero
    code is restarted while `restarts` allow, else its last log lines are printed and the run stops.
    Returns the name of what failed, or None. With learners in the plan, the run is done when they
    are (their samplers run until then and are stopped by the caller, not counted as failures)."""
    tails = {name: _Tail(out / name / "metrics.jsonl") for name in nodes}
    left = dict.fromkeys(nodes, restarts)
    args_of = {name: (path, cfg, extra) for name, path, cfg, extra in plan}
    ends = [name for name, _, cfg, _ in plan if cfg.role == "learner"] or \
        [name for name, _, cfg, _ in plan if cfg.rounds != SAMPLER_ROUNDS] or list(nodes)
    while True:
        for tail in tails.values():
            for m in tail.new():
                print(progress_line(m), flush=True)
        if bootstrap.poll() is not None:
            print(f"the bootstrap peer exited with code {bootstrap.returncode}; last lines of {bootstrap.log}:\n"
                  f"{tail_lines(bootstrap.log, 8)}\nstopping every node", flush=True)
            return "bootstrap"
        for name, child in list(nodes.items()):
            code = child.poll()
            if code in (None, 0):
                continue
            print(f"node {name} exited with code {code}; last lines of {child.log}:\n{tail_lines(child.log, 8)}",
                  flush=True)
            if left[name] <= 0:
                status[name] = f"died (exit {code}), see {child.log}"
                print(f"stopping every node ({'no restarts left' if restarts else 'swarm local --restart N restarts it'})",
                      flush=True)
                return name
            left[name] -= 1
            print(f"restarting {name} ({restarts - left[name]} of {restarts}); it resumes from its last checkpoint",
                  flush=True)
            path, cfg, extra = args_of[name]
            nodes[name] = _start(name, path, cfg, out, maddrs, extra)
            children.append(nodes[name])
        if all(nodes[name].poll() == 0 for name in ends):
            for tail in tails.values():  # the last lines written before exit
                for m in tail.new():
                    print(progress_line(m), flush=True)
            return None
        time.sleep(0.5)


def _mean(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _se(se: float | None) -> str:
    return "" if se is None or se != se else f" ± {se:.3f}"


def _gain(before: float | None, se_b: float | None, after: float | None, se_a: float | None) -> str:
    """after − before and how many standard errors that is (the two evaluations' errors combined)."""
    if before is None or after is None:
        return "-"
    if not se_b or not se_a or se_b != se_b or se_a != se_a:
        return f"{after - before:+.3f}"
    se = (se_b**2 + se_a**2) ** 0.5
    return f"{after - before:+.3f} ({(after - before) / se:+.1f} s.e.)"


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def control_line(swarm, solo, swarm_name: str, solo_name: str) -> str:
    """Node 0's held-out gain minus its solo control's (same seed, task stream and held-out items)."""
    if not swarm or not solo or None in (swarm[0], swarm[2], solo[0], solo[2]):
        return f"{swarm_name} vs its solo control {solo_name}: no held-out evaluation to compare"
    d = (swarm[2] - swarm[0]) - (solo[2] - solo[0])
    # the same seed evaluates the same items with the same samples before training: then the befores cancel
    same_start = abs(swarm[0] - solo[0]) < 1e-12
    ses = [x for x in ((swarm[3], solo[3]) if same_start else (swarm[1], swarm[3], solo[1], solo[3]))
           if x is not None and x == x]
    se = sum(x * x for x in ses) ** 0.5 if len(ses) == (2 if same_start else 4) else None
    return (f"{swarm_name} with its peers vs {solo_name} alone (same seed, task stream, generation and held-out items): "
            f"gain {swarm[2] - swarm[0]:+.3f} vs {solo[2] - solo[0]:+.3f}, difference {d:+.3f}"
            + (f" (± {se:.3f} s.e.; one seed — 8-seed answers: docs/benchmarks/learning.md §12D (teacher pairs), §13 (swarms))" if se else ""))


def summarize(out: Path, names: list[str], status: dict[str, str] | None = None,
              controls: list[tuple[str, str]] = ()) -> None:
    """Per-node table (how it ended, rounds, groups used, reward first vs last fifth, held-out accuracy
    before → after with standard errors, and the gain in standard errors) + metrics.png; per solo control
    (a node's name, its control's), the node's gain against the control's."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"swarm local · {out}")
    status = status or {}
    for col in ("node", "status", "rounds", "own groups", "peer groups", "peer IS weight", "peers",
                "reward first→last", "held-out acc before → after (± s.e.)", "gain / s.e."):
        table.add_column(col)
    dirs, held = [], {}
    for name in names:
        path = out / name / "metrics.jsonl"
        rows = read_records(path) if path.is_file() else []
        if not rows:
            table.add_row(name, status.get(name, "-"), "0", "-", "-", "-", "-", "-", "-", "-")
            continue
        dirs.append(out / name)
        k = max(1, len(rows) // 5)  # first / last fifth of the run
        evals = [m.eval for m in rows if m.eval.eval_accuracy is not None]
        before, se_b = rows[0].eval.eval_accuracy_before, rows[0].eval.eval_se_before
        if before is None and evals:
            before, se_b = evals[0].eval_accuracy, evals[0].eval_se
        after, se_a = (evals[-1].eval_accuracy, evals[-1].eval_se) if evals else (None, None)
        held[name] = (before, se_b, after, se_a)
        peers = sorted({p for m in rows for p in m.step.external_peers})
        weights = [m.metrics.is_weight_external for m in rows
                   if m.step.groups_external and m.metrics.is_weight_external is not None]
        rewards = [m.generation.reward_mean for m in rows]
        table.add_row(
            name, status.get(name, "-"), str(len(rows)), str(sum(m.step.groups_local for m in rows)),
            str(sum(m.step.groups_external for m in rows)), _fmt(_mean(weights)), str(len(peers)),
            f"{_fmt(_mean(rewards[:k]))} → {_fmt(_mean(rewards[-k:]))}",
            f"{_fmt(before)}{_se(se_b)} → {_fmt(after)}{_se(se_a)}", _gain(before, se_b, after, se_a),
        )
    Console(width=max(170, Console().width)).print(table)
    for node, solo in controls:
        print(control_line(held.get(node), held.get(solo), node, solo))
    if dirs:
        from ops.cli.plot import plot_runs

        print(f"plot: {plot_runs(dirs, out / 'metrics.png')}")
