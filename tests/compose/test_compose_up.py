"""docker-compose.yml on a real engine (conftest.py brings it up and waits until both nodes trained on ≥ 8 of
each other's groups): one image built once and run by every rlswarm service, the lab model built once before
the nodes start, peers named on the dashboard, Prometheus on 127.0.0.1 scraping both nodes, every Grafana
expression answered by the live Prometheus, no container running as root, each peer's key on a volume of its own,
the peers file read-only to the nodes, and nothing left behind by `down` (run last: it takes it down)."""

from __future__ import annotations

import json
import time
from datetime import datetime

from tests.compose.engine import sh
from tests.compose.stack import (
    GROUPS,
    MAY_BE_EMPTY,
    NODES,
    RLSWARM_SERVICES,
    Stack,
    get_json,
    get_text,
    groups_used_from,
    label_values,
    prom_query,
    runnable,
)
from tests.unit.ops.test_grafana import dashboard, queries


def _time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp[:26].rstrip("Z"))  # Docker's nanoseconds: microseconds are enough


def test_one_image_built_once_and_run_by_every_rlswarm_service(up):
    config = up.stack.config()["services"]
    assert [name for name, svc in config.items() if "build" in svc] == ["model"]
    image_id = json.loads(sh(["docker", "image", "inspect", up.image]).stdout)[0]["Id"]
    containers = up.stack.containers()
    assert set(RLSWARM_SERVICES) <= set(containers)
    assert {name: containers[name]["Image"] for name in RLSWARM_SERVICES} == dict.fromkeys(RLSWARM_SERVICES, image_id)


def test_lab_model_built_once_before_the_nodes_start(up):
    containers = up.stack.containers()
    model = containers["model"]["State"]
    assert (model["Status"], model["ExitCode"]) == ("exited", 0)
    assert "building built-in model 'lab-spell'" in up.stack.logs("model")
    for name in NODES:
        assert "building built-in model" not in up.stack.logs(name), name
        assert _time(containers[name]["State"]["StartedAt"]) >= _time(model["FinishedAt"]), name


def test_each_node_trained_on_the_others_groups_named_by_the_dashboard(up):
    state = get_json(f"{up.dashboard}/api/state")
    ids = {n["label"]: n["peer_id"] for n in state["nodes"]}
    assert set(ids) == set(NODES) and all(ids.values()) and len(set(ids.values())) == 2, ids
    used = groups_used_from(state)
    for a, b in ((NODES[0], NODES[1]), (NODES[1], NODES[0])):
        assert used.get((a, b), 0) >= GROUPS, used
    # Prometheus says the same, in peer ids: each node's swarm_node_info names the peer the other trained on
    info = {r["metric"]["node"]: r["metric"]["peer_id"] for r in prom_query(up.prometheus, "swarm_node_info")
            ["data"]["result"]}
    assert info == ids
    # Prometheus scrapes every 5 s, so its sample may trail the dashboard: wait up to six scrapes for one that
    # shows both counts (the counters only grow, so a sample at GROUPS can only come from real training)
    deadline, by_pair = time.monotonic() + 30, {}
    while True:
        used_prom = prom_query(up.prometheus, "swarm_peer_groups_used_total")["data"]["result"]
        by_pair = {(r["metric"]["node"], r["metric"]["peer"]): float(r["value"][1]) for r in used_prom}
        if all(by_pair.get((a, ids[b]), 0) >= GROUPS for a, b in ((NODES[0], NODES[1]), (NODES[1], NODES[0]))):
            break
        assert time.monotonic() < deadline, by_pair
        time.sleep(1)


def test_dashboard_page_answers_on_loopback(up):
    page = get_text(f"{up.dashboard}/")
    assert "<html" in page.lower() and "dashboard.js" in page
    assert "uPlot" in get_text(f"{up.dashboard}/static/vendor/uPlot.iife.min.js")
    (binding,) = up.stack.containers()["dashboard"]["HostConfig"]["PortBindings"]["8050/tcp"]
    assert binding["HostIp"] == "127.0.0.1"


def test_prometheus_on_loopback_scrapes_both_nodes(up):
    (binding,) = up.stack.containers()["prometheus"]["HostConfig"]["PortBindings"]["9090/tcp"]
    assert binding["HostIp"] == "127.0.0.1"
    targets = get_json(f"{up.prometheus}/api/v1/targets")["data"]["activeTargets"]
    assert {t["labels"]["instance"]: t["health"] for t in targets} == {f"{n}:9100": "up" for n in NODES}


def _ask_every_expression(prometheus: str) -> tuple[list[str], list[str], int]:
    errors, empty, answered = [], [], 0
    for expr in queries(dashboard()):
        values = label_values(prometheus, expr)
        if values is not None:  # the `node` variable's query
            assert set(NODES) <= set(values), values
            answered += 1
            continue
        answer = prom_query(prometheus, runnable(expr))
        if answer.get("status") != "success":
            errors.append(f"{expr}: {answer.get('error')}")
        elif not answer["data"]["result"]:
            empty.append(expr)
        else:
            answered += 1
    return errors, empty, answered


def test_every_grafana_expression_runs_against_prometheus(up):
    # a rate over [2m] has data once Prometheus holds two samples of its series in the window (a scrape every 5 s):
    # asked too soon after a series first appears it is empty, so ask again until each has data (at most 90 s)
    deadline = time.monotonic() + 90
    while True:
        errors, empty, answered = _ask_every_expression(up.prometheus)
        if errors or not [e for e in empty if not MAY_BE_EMPTY.search(e)] or time.monotonic() > deadline:
            break
        time.sleep(5)
    assert not errors, errors
    assert [e for e in empty if not MAY_BE_EMPTY.search(e)] == [], empty
    up.measured["grafana_expressions"] = {"with_data": answered, "empty": len(empty), "errors": len(errors)}
    # the held-out panel has each node's baseline from round 0 on (the first eval round is 50)
    held_out = prom_query(up.prometheus, "swarm_eval_accuracy")["data"]["result"]
    assert {r["metric"]["node"] for r in held_out} == set(NODES)


def test_no_container_runs_as_root(up):
    for name, c in up.stack.containers().items():
        user = c["Config"]["User"]  # compose's `user`, else the image's USER
        assert user and user.split(":")[0] not in ("0", "root"), (name, user)
        if c["State"]["Status"] == "running":  # and what the kernel says the process runs as
            assert sh(["docker", "exec", c["Id"], "id", "-u"]).stdout.strip() not in ("", "0"), name


def test_each_peer_keeps_its_key_on_a_volume_only_it_mounts(up):
    containers = up.stack.containers()
    mounts = {name: {m["Destination"]: m for m in c["Mounts"]} for name, c in containers.items()}
    for name, key in [("bootstrap", "bootstrap.key"), *((n, "node.key") for n in NODES)]:
        volume = mounts[name]["/identity"]["Name"]
        assert volume == f"{up.stack.project}_identity-{name}", (name, volume)
        assert [n for n, ms in mounts.items() if any(m.get("Name") == volume for m in ms.values())] == [name]
        sh(["docker", "exec", containers[name]["Id"], "test", "-s", f"/identity/{key}"])  # written there
    assert "/identity" not in mounts["dashboard"]
    found = sh(["docker", "exec", containers["dashboard"]["Id"], "python", "-c",
                "import glob; print(glob.glob('/runs/**/*.key', recursive=True))"]).stdout.strip()
    assert found == "[]", found  # the dashboard sees no key: none is on the runs volume


def test_the_nodes_cannot_rewrite_the_peers_file(up):
    containers = up.stack.containers()
    for name in NODES:
        shared = next(m for m in containers[name]["Mounts"] if m["Destination"] == "/shared")
        assert shared["RW"] is False, shared
        wrote = sh(["docker", "exec", containers[name]["Id"], "python", "-c", "open('/shared/peers.txt', 'a')"],
                   check=False)
        assert wrote.returncode != 0 and "Read-only file system" in wrote.stderr, wrote.stderr
    assert sh(["docker", "exec", containers["bootstrap"]["Id"], "test", "-s", "/shared/peers.txt"]).returncode == 0


def test_every_port_on_loopback_and_grafana_needs_its_password(up):
    for name, c in up.stack.containers().items():
        for port, bindings in (c["HostConfig"]["PortBindings"] or {}).items():
            assert all(b["HostIp"] == "127.0.0.1" for b in bindings), (name, port, bindings)
    grafana = up.stack.config()["services"]["grafana"]
    assert grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == up.env["GRAFANA_ADMIN_PASSWORD"]
    without = Stack(up.stack.project, {k: v for k, v in up.env.items() if k != "GRAFANA_ADMIN_PASSWORD"})
    refused = without.compose("config", check=False)
    assert refused.returncode != 0 and "GRAFANA_ADMIN_PASSWORD" in refused.stderr, refused.stderr


def test_down_leaves_no_container_network_or_volume(up):
    named = {m["Name"] for c in up.stack.containers().values() for m in c["Mounts"] if m["Type"] == "volume"}
    assert named and all(v.startswith(up.stack.project + "_") for v in named), named  # no anonymous volume
    up.stack.down()
    assert up.stack.leftovers() == {"container": [], "network": [], "volume": []}
    assert set(sh(["docker", "volume", "ls", "-q"]).stdout.split()) <= up.volumes_before
