"""`swarm local --dashboard` in a real browser: a 2-node swarm of real processes on 127.0.0.1, its dashboard
loaded by headless Chromium (tests/integration/browser.py), which must draw data in all six panels, fill the
peers table with the two nodes' peer ids and show the config, and then update without a reload as rounds
land. The same swarm serves the nodes' /metrics: every metric the Grafana dashboard's panels query
(deploy/grafana) must be one a live node exports.

SWARM_DASHBOARD_SCREENSHOT=docs/dashboard.png writes the screenshot the README shows."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.integration.browser import Browser, chromium_path
from tests.unit.ops.test_grafana import dashboard as grafana_dashboard
from tests.unit.ops.test_grafana import metric_names, queries

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
PANELS = ("reward", "accuracy", "held_out", "loss", "kl", "groups")


def _free_ports(n: int) -> int:
    """A port p with p..p+n-1 free (node i serves /metrics on the configured port + i)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n > 65535:
            continue
        try:
            socks = [socket.socket() for _ in range(n)]
            for i, s in enumerate(socks):
                s.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port range")


def _wait(what: str, fn, timeout: float, proc: subprocess.Popen, log: Path):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        if proc.poll() is not None:
            pytest.fail(f"swarm local exited ({proc.returncode}) while waiting for {what}:\n{log.read_text()[-3000:]}")
        time.sleep(1)
    pytest.fail(f"timed out waiting for {what}")


def _exported(port: int) -> set[str]:
    """Sample names a live /metrics serves, and those of every family it declares (a `# TYPE` line: a labelled
    counter such as swarm_peer_records_dropped_total has no sample until its first drop)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            if kind == "counter":
                names.add(name if name.endswith("_total") else name + "_total")
            names |= {name + k for k in {"histogram": ["_bucket", "_sum", "_count"]}.get(kind, [""])}
        elif line and not line.startswith("#"):
            names.add(line.split("{")[0].split()[0])
    return names


def test_dashboard_of_a_live_two_node_swarm_in_chromium(tmp_path):
    exe = chromium_path()
    out, log = tmp_path / "run", tmp_path / "local.log"
    dash_port, metrics_port = _free_ports(1), _free_ports(2)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ops.cli", "local", "--nodes", "2", "--config", "examples/tiny-swarm.yaml",
         "--rounds", "1000", "--out", str(out), "--dashboard", str(dash_port),
         "--set", f"metrics.prometheus_port={metrics_port}", "--set", "eval.every=2"],
        cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=open(log, "w"), stderr=subprocess.STDOUT,
        start_new_session=True)
    browser = None
    try:
        url = f"http://127.0.0.1:{dash_port}/"
        _wait("the dashboard's address", lambda: url in log.read_text(), 120, proc, log)
        _wait("a round of each node", lambda: all((out / n / "metrics.jsonl").is_file() for n in ("tiny-0", "tiny-1")),
              300, proc, log)
        peer_ids = {n: (out / n / "node.log").read_text().split(" peer ", 1)[1].split()[0] for n in ("tiny-0", "tiny-1")}

        browser = Browser(exe)
        browser.goto(url)
        state = lambda: browser.evaluate("JSON.stringify(window.dashboard || null)")  # noqa: E731

        def drawn():
            s = json.loads(state() or "null")
            ok = s and all(s["panels"].get(p, {}).get("points", 0) > 0 and s["panels"][p]["drawn"] for p in PANELS)
            return s if ok and s["peers"] >= 2 else None

        first = _wait("data in all six panels and two peers", drawn, 180, proc, log)
        assert first["error"] is None and first["errors"] == []
        assert browser.evaluate("document.querySelectorAll('#panels canvas').length") >= len(PANELS)
        table = browser.evaluate("[...document.querySelectorAll('#peers tbody tr')].map(r => "
                                 "[r.dataset.peer, ...[...r.cells].map(c => c.textContent)])")
        by_peer = {row[0]: row[1:] for row in table}
        assert set(by_peer) == set(peer_ids.values()), table  # each node lists the other, by its real peer id
        for name, pid in peer_ids.items():
            node, _, model, last_seen, received, used, weight, drops = by_peer[pid]
            assert node != name and model == "tiny-qwen2" and "ago" in last_seen, by_peer[pid]
            assert int(received) > 0 and int(used) >= 0 and float(weight) > 0, by_peer[pid]
        config = browser.evaluate("document.getElementById('nodes').textContent")
        assert '"spec": "tiny-qwen2"' in config and "tiny-0" in config and "tiny-1" in config
        assert browser.evaluate("document.getElementById('status').textContent").startswith("2 node(s)")

        # the page updates itself: later rounds appear without a reload
        def moved():
            s = json.loads(state())
            later = any((s["lastRounds"][n] or -1) > (first["lastRounds"][n] or -1) for n in first["lastRounds"])
            grew = any(s["panels"][p]["points"] > first["panels"][p]["points"] for p in PANELS)
            return s if later and grew and s["changes"] > first["changes"] else None

        second = _wait("the page to show later rounds", moved, 120, proc, log)
        assert second["polls"] > first["polls"] and second["error"] is None and second["errors"] == []
        assert second["violations"] == [], second["violations"]  # nothing the page's CSP had to block
        shot = tmp_path / "dashboard.png"
        browser.screenshot(shot)
        assert shot.stat().st_size > 20_000  # six drawn panels, not a blank page
        if os.environ.get("SWARM_DASHBOARD_SCREENSHOT"):
            shutil.copy(shot, ROOT / os.environ["SWARM_DASHBOARD_SCREENSHOT"])

        # every metric a Grafana panel queries is exported by the live nodes
        exported = _exported(metrics_port) | _exported(metrics_port + 1)
        for expr in queries(grafana_dashboard()):
            missing = metric_names(expr) - exported
            assert not missing, f"Grafana queries {sorted(missing)} ({expr}); a live node does not export it"
    finally:
        if browser is not None:
            browser.close()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert proc.returncode == 130, log.read_text()[-3000:]  # stopped by the SIGINT above, mid-run
    with pytest.raises(OSError):  # the dashboard stopped with the swarm
        urllib.request.urlopen(f"http://127.0.0.1:{dash_port}/", timeout=3)
