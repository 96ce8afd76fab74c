"""What `swarm dashboard` shows, read from run dirs on every poll: one JSON snapshot.

  nodes  per node: its name, peer id and model (node.json, which every node writes into its run dir; in a
         run dir without one, the first lines of node.log), the resolved config (config.json, secrets
         hidden), and the series of `swarm plot`'s six panels — reward and accuracy of its
         own completions (per round and EMA), held-out accuracy ± one standard error (round −1:
         before training), the loss, the KL estimate to the sampler on own and peers' tokens, and
         own vs peers' groups trained per round; for a distillation student, its teacher, KL and headroom gate
         (`distill_state`)
  peers  per (node, peer it heard from): the peer's model as its records name it, when its records
         last arrived, groups accepted and trained on, the mean IS weight on peers' rows in the
         rounds that trained on its groups, and its records dropped by reason (`peer_stats` in
         metrics.jsonl; a run written before that field lists the peers it trained on only)

Nothing is written; a metrics.jsonl is re-parsed only when its size or mtime changed.
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Any

from node.round.record import RoundRecord, read_records
from ops.dashboard.runs import EMA, ema, run_files

HIDDEN = "(hidden)"
# config keys whose values never reach the page: credentials, and the path of the node's private key
# a key that names a secret: *secret*, *password*, *credential*, identity_path, *access_key*, *private_key*,
# *api_key* (wandb_api_key …), a bare `key`, or one ending in token (hf_token, auth_token, …)
MAX_PEER_ROWS = 64  # peers listed per node
SECRET_KEY = re.compile(r"secret|password|passwd|credential|identity_path|access_?key|private_?key|api_?key"
                        r"|^key$|(^|[_.-])token$", re.I)
_PEER_LINE = re.compile(r"^\[(?P<name>[^\]]+)\] peer (?P<peer>\S+)")
_MODEL_LINE = re.compile(r"^\[(?P<name>[^\]]+)\] model (?P<model>\S+) on ")


def redact(value: Any, key: str = "") -> Any:
    """The config with every secret-looking key's value replaced by "(hidden)" (null stays null)."""
    if isinstance(value, dict):
        return {k: redact(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, key) for v in value]
    return HIDDEN if value is not None and SECRET_KEY.search(key) else value


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def _clean(xs: list[float]) -> list[float | None]:
    return [None if x != x else x for x in xs]  # NaN → null (JSON)


def series(rows: list[RoundRecord]) -> dict[str, list]:
    """The per-round columns of the six panels, aligned on the rows' rounds (null where a round has none)."""
    trained = [m.trained for m in rows]
    col = {
        "round": [m.round for m in rows],
        "reward": [_num(m.generation.reward_mean) for m in rows],
        "accuracy": [_num(m.generation.accuracy) for m in rows],
        "loss": [_num(m.metrics.loss) if t else None for m, t in zip(rows, trained)],
        "kl_own": [_num(m.metrics.kl_beh_local) if t else None for m, t in zip(rows, trained)],
        "kl_peers": [_num(m.metrics.kl_beh_external) if t and m.step.groups_external else None
                     for m, t in zip(rows, trained)],
        "groups_own": [m.step.groups_local for m in rows],
        "groups_peers": [m.step.groups_external for m in rows],
    }
    if not any(col["groups_peers"]):  # a node that never trained on a peer's group (a solo run): no peers' line
        col["groups_peers"] = [None] * len(rows)
    for key in ("reward", "accuracy", "loss"):
        col[f"{key}_ema"] = _clean(ema(col[key], EMA))
    return col


def held_out(rows: list[RoundRecord]) -> dict[str, list]:
    """Held-out accuracy points with one standard error (the run's own, else binomial on eval_size)."""
    pts = []
    if rows and (first := rows[0].eval).eval_accuracy_before is not None:
        pts.append((-1, first.eval_accuracy_before, first.eval_se_before, first.eval_size))
    pts += [(m.round, m.eval.eval_accuracy, m.eval.eval_se, m.eval.eval_size)
            for m in rows if m.eval.eval_accuracy is not None]
    out: dict[str, list] = {"round": [], "acc": [], "se": []}
    for r, p, se, n in pts:
        if _num(se) is None:
            se = math.sqrt(p * (1 - p) / n) if n else None
        out["round"].append(r)
        out["acc"].append(_num(p))
        out["se"].append(_num(se))
    return out


def distill_state(rows: list[RoundRecord]) -> dict | None:
    """A student's distillation as of its latest round that asked or gated: the teacher asked, its KL to it, the
    headroom gate (node/distill/gate.py: per teacher its state and re-verified score, ours, the margin); None for a
    node that is no student."""
    for m in reversed(rows):
        if m.distill is not None and m.distill.distill_requests is not None:
            d = m.distill
            return {"round": m.round, "teacher": d.distill_teacher, "kl": _num(m.metrics.distill_kl),
                    "share_scored": _num(d.distill_share_scored), "gate": d.distill_gate}
    return None


def node_facts(run_dir: Path) -> dict[str, str]:
    """peer id and model spec of the node whose run dir this is: its node.json, else its node.log."""
    try:
        doc = json.loads((run_dir / "node.json").read_text())
    except (OSError, ValueError):
        return _log_facts(run_dir / "node.log")
    if not isinstance(doc, dict):
        return _log_facts(run_dir / "node.log")
    return {k: str(doc[k]) for k in ("peer_id", "model") if isinstance(doc.get(k), str) and doc[k]}


def _log_facts(log: Path) -> dict[str, str]:
    """peer id and model spec from the first lines of a node.log ("[lab-0] peer Qm…", "[lab-0] model lab-spell on …")."""
    facts: dict[str, str] = {}
    try:
        with open(log, errors="replace") as f:
            for _, line in zip(range(40), f):
                if (m := _PEER_LINE.match(line)) and "peer_id" not in facts:
                    facts["peer_id"] = m["peer"]
                elif (m := _MODEL_LINE.match(line)) and "model" not in facts:
                    facts["model"] = m["model"]
    except OSError:
        pass
    return facts


def peer_rows(label: str, rows: list[RoundRecord], names: dict[str, str]) -> list[dict]:
    """One row per peer this node heard from (module docstring); `names` maps peer ids of the runs shown to labels."""
    peers: dict[str, dict] = {}

    def entry(peer: str) -> dict:
        return peers.setdefault(peer, {"node": label, "peer": peer, "peer_name": names.get(peer, ""), "model": "",
                                       "last_seen": None, "received": 0, "used": 0, "drops": {}, "_w": []})

    for m in rows:
        stats = m.peers.peer_stats
        if stats is None:  # older runs: only which peers a round trained on
            stats = {p: {"used": None} for p in m.step.external_peers}
        for peer, st in stats.items():
            e = entry(peer)
            e["model"] = st.get("model") or e["model"]
            if st.get("received") or st.get("dropped") or st.get("used") is None:
                e["last_seen"] = m.time or e["last_seen"]
            if st.get("used") is None:  # an older run: nothing known but that the peer's groups were trained on
                e["received"] = None
            elif e["received"] is not None:
                e["received"] += st.get("received", 0)
            if st.get("used") is None:
                e["used"] = None
            elif e["used"] is not None:
                e["used"] += st["used"]
            for reason, n in (st.get("dropped") or {}).items():
                e["drops"][reason] = e["drops"].get(reason, 0) + n
            if (st.get("used") or st.get("used") is None) and _num(m.metrics.is_weight_external) is not None:
                e["_w"].append(m.metrics.is_weight_external)
    out = []
    for e in peers.values():
        w = e.pop("_w")
        e["is_weight"] = sum(w) / len(w) if w else None
        out.append(e)
    out.sort(key=lambda e: (e["node"], -(e["last_seen"] or 0)))
    return out[:MAX_PEER_ROWS]  # the most recently seen: identities are free, the page stays bounded


class Snapshots:
    """Reads the run dirs on every call; parses a metrics.jsonl again only when it changed."""

    def __init__(self, dirs: list[Path]):
        self.dirs = [Path(d) for d in dirs]
        self._rows: dict[Path, tuple[tuple[int, int], list[RoundRecord]]] = {}

    def _read(self, path: Path) -> list[RoundRecord]:
        st = path.stat()
        key = (st.st_size, st.st_mtime_ns)
        cached = self._rows.get(path)
        if cached is None or cached[0] != key:
            try:
                rows = read_records(path)
            except (ValueError, KeyError, TypeError):  # a line being written: keep what was read before
                rows = cached[1] if cached else []
            self._rows[path] = (key, rows)
        return self._rows[path][1]

    def files(self) -> list[tuple[str, Path]]:
        try:
            return run_files(self.dirs)
        except FileNotFoundError:  # a swarm still starting: no node has written a round yet
            return []

    def snapshot(self) -> dict[str, Any]:
        nodes = []
        for label, path in self.files():
            rows = self._read(path)
            facts = node_facts(path.parent)
            cfg_path = path.parent / "config.json"
            try:
                config = redact(json.loads(cfg_path.read_text())) if cfg_path.is_file() else None
            except ValueError:
                config = None
            nodes.append({"label": label, "node": (rows[0].node or label) if rows else label,
                          "dir": str(path.parent), "peer_id": facts.get("peer_id", ""),
                          "model": facts.get("model") or (config or {}).get("model", {}).get("spec", ""),
                          "rounds": len(rows), "last_round": rows[-1].round if rows else None,
                          "last_time": (rows[-1].time or None) if rows else None,
                          "series": series(rows), "held_out": held_out(rows), "config": config,
                          "distill": distill_state(rows), "_rows": rows})
        names = {n["peer_id"]: n["label"] for n in nodes if n["peer_id"]}
        models = {n["peer_id"]: n["model"] for n in nodes if n["peer_id"]}
        peers = [p for n in nodes for p in peer_rows(n["label"], n.pop("_rows"), names)]
        for p in peers:  # a peer whose records named no model, shown here as one of the runs: that run's model
            p["model"] = p["model"] or models.get(p["peer"], "")
        return {"dirs": [str(d) for d in self.dirs], "time": time.time(), "ema": EMA, "nodes": nodes, "peers": peers}
