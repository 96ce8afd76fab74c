"""ops.dashboard without a browser: the snapshot of run dirs (series, peers table, config with secrets hidden),
the read-only server, the CLI's one-line errors, and the per-peer tallies behind the peers table."""

from __future__ import annotations

import io
import json
import socket
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from node.books.metrics import MetricsConfig, MetricsLog, Prom
from node.round.steps import PeerTally, by_peer, merge_by_peer
from ops.cli.main import main
from ops.dashboard.server import Dashboard
from ops.dashboard.state import HIDDEN, Snapshots, node_facts, redact
from node.round.record import RoundRecord

PEER = "QmPeerOne"


def _row(r: int, **kw) -> dict:
    base = {"node": "lab-0", "round": r, "reward_mean": 0.5 + r / 10, "accuracy": 0.25, "loss": -0.01, "rows_trained": 8,
            "kl_beh_local": 0.0, "kl_beh_external": 0.1, "groups_local": 4, "groups_external": 2,
            "is_weight_external": 0.9, "time": 1000.0 + r, "eval_accuracy": None}
    return {**base, **kw}


@pytest.fixture
def run_dir(tmp_path):
    d = tmp_path / "run" / "lab-0"
    d.mkdir(parents=True)
    rows = [_row(0, eval_accuracy_before=0.4, eval_se_before=0.02, eval_size=100,
                 peer_stats={PEER: {"model": "lab-spell", "received": 3, "used": 2, "dropped": {"stale_age": 1}}}),
            _row(1, peer_stats={PEER: {"model": "", "received": 0, "used": 0, "dropped": {"bad_logprobs": 2}}},
                 is_weight_external=float("nan"), groups_external=0),
            _row(2, eval_accuracy=0.5, eval_se=None, eval_size=100, is_weight_external=0.7,
                 peer_stats={PEER: {"model": "", "received": 0, "used": 4, "dropped": {}}})]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "node.log").write_text(f"[lab-0] peer QmSelf listening on /ip4/127.0.0.1/tcp/1\n"
                                "[lab-0] model lab-spell on cpu · float32 weights\n")
    (d / "config.json").write_text(json.dumps({"name": "lab-0", "model": {"spec": "lab-spell"},
                                               "swarm": {"identity_path": "/home/me/node.key", "initial_peers": []},
                                               "metrics": {"wandb_api_key": "abc123", "wandb_project": "rlswarm"}}))
    return tmp_path / "run"


def test_snapshot_series_peers_and_config(run_dir):
    snap = Snapshots([run_dir]).snapshot()
    (node,) = snap["nodes"]
    assert (node["label"], node["peer_id"], node["model"], node["rounds"], node["last_round"]) == (
        "lab-0", "QmSelf", "lab-spell", 3, 2)
    s = node["series"]
    assert s["round"] == [0, 1, 2] and s["reward"] == [0.5, 0.6, 0.7] and len(s["reward_ema"]) == 3
    assert s["kl_peers"] == [0.1, None, 0.1]  # peers' KL only in rounds that trained on peers' groups
    h = node["held_out"]
    assert h["round"] == [-1, 2] and h["se"][0] == 0.02 and h["se"][1] == pytest.approx((0.25 / 100) ** 0.5)
    (peer,) = snap["peers"]
    assert (peer["peer"], peer["model"], peer["received"], peer["used"]) == (PEER, "lab-spell", 3, 6)
    assert peer["drops"] == {"stale_age": 1, "bad_logprobs": 2} and peer["last_seen"] == 1001.0
    assert peer["is_weight"] == pytest.approx(0.8)  # rounds 0 and 2 trained on its groups
    cfg = node["config"]
    assert cfg["swarm"]["identity_path"] == HIDDEN and cfg["metrics"]["wandb_api_key"] == HIDDEN
    assert cfg["metrics"]["wandb_project"] == "rlswarm" and cfg["swarm"]["initial_peers"] == []


def test_redact_keeps_nulls_and_ordinary_keys():
    assert redact({"a": {"password": "x", "identity_path": None, "max_new_tokens": 16}}) == {
        "a": {"password": HIDDEN, "identity_path": None, "max_new_tokens": 16}}


def test_older_runs_without_peer_stats_list_the_peers_they_trained_on(tmp_path):
    d = tmp_path / "old"
    d.mkdir()
    (d / "metrics.jsonl").write_text(json.dumps(_row(0, external_peers=[PEER])) + "\n")
    (peer,) = Snapshots([d]).snapshot()["peers"]
    assert peer["received"] is None and peer["used"] is None and peer["is_weight"] == 0.9


def _get(url: str):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status, r.headers, r.read()


def test_server_is_read_only_and_serves_only_its_files(run_dir):
    dash = Dashboard([run_dir], "127.0.0.1", 0).start()
    try:
        code, headers, body = _get(dash.url)
        assert code == 200 and b"uPlot.iife.min.js" in body and "default-src 'self'" in headers["Content-Security-Policy"]
        code, headers, body = _get(dash.url + "static/vendor/uPlot.iife.min.js")
        assert code == 200 and headers["Content-Type"].startswith("text/javascript") and len(body) > 40_000
        code, _, body = _get(dash.url + "api/state")
        state = json.loads(body)  # NaN became null: the browser's JSON.parse takes it
        assert state["nodes"][0]["series"]["round"] == [0, 1, 2]
        assert b"node.key" not in body and b"abc123" not in body
        for path in ("static/../state.py", "static/%2e%2e/server.py", "etc/passwd", "static/vendor/LICENSE-uPlot"):
            with pytest.raises(urllib.error.HTTPError) as err:
                _get(dash.url + path)
            assert err.value.code == 404, path
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(urllib.request.Request(dash.url + "api/state", data=b"{}", method="POST"), timeout=5)
        assert err.value.code == 501
        assert dash.httpd.server_address[0] == "127.0.0.1"
    finally:
        dash.close()


def test_bound_to_this_machine_by_default(tmp_path):
    from ops.cli.main import build_parser

    args = build_parser().parse_args(["dashboard", str(tmp_path)])
    assert (args.host, args.port) == ("127.0.0.1", 8050)
    assert build_parser().parse_args(["local", "--config", "x.yaml", "--dashboard"]).dashboard == 8050
    dash = Dashboard([tmp_path], port=0)
    try:
        assert dash.httpd.server_address[0] == "127.0.0.1"
    finally:
        dash.close()


def test_cli_errors_are_one_line_exit_2(tmp_path, capsys):
    assert main(["dashboard", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.strip() == f"error: no run dir {tmp_path / 'missing'}"
    assert main(["dashboard", str(tmp_path), "--port", "70000"]) == 2
    assert "not a TCP port" in capsys.readouterr().err
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert main(["dashboard", str(tmp_path), "--port", str(s.getsockname()[1])]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already in use" in err


def test_per_peer_tallies_and_their_prometheus_series():
    rec = lambda peer, name: SimpleNamespace(peer=peer, model=SimpleNamespace(name=name))  # noqa: E731
    groups = [SimpleNamespace(source="A")]
    first = by_peer([rec("A", "lab-spell"), rec("A", "lab-spell"), rec("B", "x")], groups, {"A": {"stale_age": 1}})
    assert first == {"A": PeerTally("lab-spell", 1, {"stale_age": 1}), "B": PeerTally("x", 0, {})}
    both = merge_by_peer(first, {"A": PeerTally("", 2, {"stale_age": 2, "bad_logprobs": 1})})
    assert both["A"] == PeerTally("lab-spell", 3, {"stale_age": 3, "bad_logprobs": 1})
    assert both["A"].stats(2) == {"model": "lab-spell", "received": 3, "dropped": {"stale_age": 3, "bad_logprobs": 1},
                                  "used": 2}
    prom = Prom("lab-0")
    prom.observe(RoundRecord.from_line({**_row(0), "step_s": 0.1, "tokens_per_s": 10.0,
                  "peer_stats": {"A": {"model": "lab-spell", "received": 3, "used": 2, "dropped": {"stale_age": 1}}}}))
    get = prom.registry.get_sample_value
    assert get("swarm_peer_groups_received_total", {"node": "lab-0", "peer": "A"}) == 3
    assert get("swarm_peer_groups_used_total", {"node": "lab-0", "peer": "A"}) == 2
    assert get("swarm_peer_records_dropped_total", {"node": "lab-0", "peer": "A", "reason": "stale_age"}) == 1
    assert get("swarm_peer_info", {"node": "lab-0", "peer": "A", "model": "lab-spell"}) == 1
    assert get("swarm_groups_trained", {"node": "lab-0", "source": "peers"}) == 2
    assert get("swarm_loss", {"node": "lab-0"}) == -0.01


def test_peers_are_named_from_the_node_json_every_node_writes(tmp_path):
    """A run dir written by `swarm node` alone (docker compose: no node.log) names its node's peer id, so each
    node's peers table names the other node; node.json wins over node.log, which older run dirs still have."""
    for name, me, other in (("node-0", "QmZero", "QmOne"), ("node-1", "QmOne", "QmZero")):
        d = tmp_path / name
        d.mkdir()
        MetricsLog(d, name, MetricsConfig(console=False), stream=io.StringIO(),
                   identity={"name": name, "peer_id": me, "model": "lab-spell"})
        (d / "metrics.jsonl").write_text(json.dumps(_row(0, node=name, peer_stats={other: {"received": 4, "used": 4}}))
                                         + "\n")
    (tmp_path / "node-0" / "node.log").write_text("[node-0] peer QmStale listening on /ip4/127.0.0.1/tcp/1\n")
    snap = Snapshots([tmp_path]).snapshot()
    assert {n["label"]: (n["peer_id"], n["model"]) for n in snap["nodes"]} == {
        "node-0": ("QmZero", "lab-spell"), "node-1": ("QmOne", "lab-spell")}
    assert {(p["node"], p["peer_name"], p["used"]) for p in snap["peers"]} == {("node-0", "node-1", 4),
                                                                               ("node-1", "node-0", 4)}
    assert node_facts(tmp_path / "node-0") == {"peer_id": "QmZero", "model": "lab-spell"}
    (tmp_path / "node-0" / "node.json").write_text("{half a file")  # unreadable: the node.log fallback
    assert node_facts(tmp_path / "node-0") == {"peer_id": "QmStale"}
    solo = tmp_path / "solo"
    solo.mkdir()
    MetricsLog(solo, "solo", MetricsConfig(console=False), stream=io.StringIO(),
               identity={"name": "solo", "peer_id": None, "model": "lab-spell"})
    assert node_facts(solo) == {"model": "lab-spell"}  # no swarm: no peer id


def test_node_identity_and_the_baseline_reach_prometheus(tmp_path):
    log = MetricsLog(tmp_path, "lab-0", MetricsConfig(console=False), stream=io.StringIO(),
                     identity={"name": "lab-0", "peer_id": "QmSelf", "model": "lab-spell"})
    get = log.prom.registry.get_sample_value
    assert get("swarm_node_info", {"node": "lab-0", "peer_id": "QmSelf", "model": "lab-spell"}) == 1
    assert get("swarm_eval_accuracy", {"node": "lab-0"}) is None  # nothing before round 0 is written
    log.write(RoundRecord.from_line({**_row(0, eval_accuracy_before=0.4, eval_se_before=0.02, eval_size=100),
                                     "step_s": 0.1, "tokens_per_s": 10.0, "round_s": 1.0}))
    node = {"node": "lab-0"}
    assert (get("swarm_eval_accuracy", node), get("swarm_eval_accuracy_se", node)) == (0.4, 0.02)
    assert get("swarm_eval_accuracy_before", node) == 0.4
    # no eval: the baseline stands
    log.write(RoundRecord.from_line({**_row(1), "step_s": 0.1, "tokens_per_s": 10.0, "round_s": 1.0}))
    assert get("swarm_eval_accuracy", node) == 0.4
    log.write(RoundRecord.from_line({**_row(2, eval_accuracy=0.55, eval_se=0.03), "step_s": 0.1, "tokens_per_s": 10.0,
                                     "round_s": 1.0}))
    assert (get("swarm_eval_accuracy", node), get("swarm_eval_accuracy_se", node)) == (0.55, 0.03)
    assert get("swarm_eval_accuracy_before", node) == 0.4
    # round 0 with its own eval (eval.every 1): the round's eval is the current one, the baseline stays apart
    both = Prom("lab-1")
    both.observe(RoundRecord.from_line({**_row(0, node="lab-1", eval_accuracy_before=0.4, eval_accuracy=0.45),
                                        "step_s": 0.1, "tokens_per_s": 10.0}))
    assert both.registry.get_sample_value("swarm_eval_accuracy", {"node": "lab-1"}) == 0.45
    assert both.registry.get_sample_value("swarm_eval_accuracy_before", {"node": "lab-1"}) == 0.4


def test_a_students_teacher_and_headroom_gate_reach_the_page(tmp_path):
    """The latest round that asked (or was gated) gives the node's teacher line: the teacher, its KL, and the gate's
    state with both re-verified scores (node/distill/gate.py); a node that is no student has none."""
    d = tmp_path / "run" / "lab-0"
    d.mkdir(parents=True)
    gate = {"margin": 0.15, "student": 0.41, "student_groups": 8,
            "teachers": {"QmTeacher": {"state": "open", "groups": 8, "score": 0.62}}}
    rows = [_row(0, distill_requests=0, distill_teacher=None, distill_kl=0.0, distill_gate={**gate, "teachers": {
                "QmTeacher": {"state": "measuring", "groups": 3, "score": 0.5}}}),
            _row(1, distill_requests=4, distill_teacher="QmTeacher", distill_kl=0.42, distill_share_scored=1.0,
                 distill_gate=gate),
            _row(2)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (node,) = Snapshots([tmp_path / "run"]).snapshot()["nodes"]
    assert node["distill"] == {"round": 1, "teacher": "QmTeacher", "kl": 0.42, "share_scored": 1.0, "gate": gate}
    solo = tmp_path / "solo" / "lab-1"
    solo.mkdir(parents=True)
    (solo / "metrics.jsonl").write_text(json.dumps(_row(0)) + "\n")
    assert Snapshots([tmp_path / "solo"]).snapshot()["nodes"][0]["distill"] is None
    js = (Path(__file__).resolve().parents[3] / "ops" / "dashboard" / "static" / "dashboard.js").read_text()
    assert "distillText(n.distill)" in js and "headroom gate" in js  # the node line draws it
