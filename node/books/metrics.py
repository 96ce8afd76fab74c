"""Per-round metrics: a JSONL log (read by `swarm plot` and bench/), a prometheus-client
`/metrics` endpoint (off unless a port is configured), one readable console line per round, and
the trackers of `report_to` (TensorBoard, Weights & Biases: node.books.tracking).

Each JSONL line is flushed and fsync'd as it is written, so a `kill -9` loses no finished
round. Every start marks the first line it writes: `"start": "fresh"` or `"start": "resumed"` with
`"start_from"` (the checkpoint, the first line also marked `"resumed": true`); a resume first removes
the lines of the rounds it will run again (written after its checkpoint), so each round has one line
(readers also keep the last line per round, as older runs may hold two). A line is at most
MAX_LINE_BYTES, its per-peer table at most MAX_PEER_STATS peers, and the Prometheus series per peer
at most MAX_PEER_SERIES peers (whatever identities peers make up).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)
from pydantic import BaseModel, ConfigDict, Field

from node.books.tracking import build_trackers, scalars_of
from node.round.record import RoundRecord

MAX_PEER_STATS = 32  # peers named in one metrics line's peer_stats (the others summed under OTHER_PEERS)
OTHER_PEERS = "(others)"
MAX_PEER_SERIES = 64  # peers with Prometheus series of their own
PEER_SERIES_S = 900.0  # a peer's series are removed once it was not seen for this long
MAX_LINE_BYTES = 64 << 10  # a metrics line is never longer (bounded_line)


@dataclass
class EvalResult:
    """One held-out evaluation: each item's fraction of correct samples (and, where given, its mean
    verifier score: partial credit, which moves before exact matches do for a weak model)."""

    per_item: list[float]
    per_item_score: list[float] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)  # each item's task kind (node.tasks.source.task_label)

    def by_label(self) -> dict[str, float]:
        """Accuracy per task kind (e.g. per difficulty band), when the held-out mix has more than one."""
        groups: dict[str, list[float]] = {}
        for label, acc in zip(self.labels, self.per_item):
            groups.setdefault(label, []).append(acc)
        return {k: statistics.fmean(v) for k, v in sorted(groups.items())} if len(groups) > 1 else {}

    @property
    def score(self) -> float:
        """Mean verifier score over items (nan when not recorded)."""
        return statistics.fmean(self.per_item_score) if self.per_item_score else float("nan")

    @property
    def accuracy(self) -> float:
        return statistics.fmean(self.per_item) if self.per_item else float("nan")

    @property
    def se(self) -> float:
        """Standard error of the accuracy over items (std of the per-item means / √N)."""
        n = len(self.per_item)
        return statistics.stdev(self.per_item) / math.sqrt(n) if n > 1 else float("nan")


class MetricsConfig(BaseModel):
    """Where metrics go."""

    model_config = ConfigDict(extra="forbid")
    prometheus_port: int | None = Field(
        None, ge=0, le=65535, description="Serve /metrics on this port (null = off; 0 = any free)."
    )
    prometheus_host: str = Field("127.0.0.1", description="Address /metrics binds to.")
    console: bool = Field(True, description="Print one progress line per round.")
    report_to: list[Literal["tensorboard", "wandb"]] = Field(
        default_factory=list, description="Experiment trackers fed every metrics line (optional extras "
        "`.[tensorboard]`, `.[wandb]`; README).")
    tensorboard_dir: str | None = Field(None, description="TensorBoard log dir; null = OUT/tensorboard.")
    wandb_project: str = Field("rlswarm", min_length=1, description="W&B project; each node is one run in it.")
    wandb_mode: Literal["online", "offline"] | None = Field(
        None, description="W&B mode; offline needs no network (`wandb sync` later); null = WANDB_MODE or online.")


class Prom:
    """The node's prometheus metrics, on a registry of its own (several nodes per process in tests)."""

    def __init__(self, node: str):
        r = self.registry = CollectorRegistry()
        lab = ["node"]
        self.node = node
        self.rounds = Counter("swarm_rounds_total", "Rounds completed", lab, registry=r)
        self.reward = Gauge("swarm_reward_mean", "Mean reward of own completions", lab, registry=r)
        self.accuracy = Gauge("swarm_accuracy", "Fraction of own completions fully correct", lab, registry=r)
        self.eval_accuracy = Gauge("swarm_eval_accuracy", "Held-out accuracy (before round 0: the baseline's)", lab,
                                   registry=r)
        self.eval_before = Gauge("swarm_eval_accuracy_before", "Held-out accuracy before training", lab, registry=r)
        self.info = Gauge("swarm_node_info", "1, with the node's peer id and model", lab + ["peer_id", "model"],
                          registry=r)
        self.published = Counter("swarm_rollouts_published_total", "Groups published", lab, registry=r)
        self.received = Counter("swarm_rollouts_received_total", "External groups accepted", lab, registry=r)
        self.dropped = Counter(
            "swarm_records_dropped_total", "Records dropped", lab + ["reason"], registry=r
        )
        self.wire_bytes = Counter("swarm_wire_bytes_total", "Bytes published", lab, registry=r)
        self.refused = Counter("swarm_refused_total", "Streams refused, bundles declined and announced addresses not "
                               "dialled (<protocol>:<why>, served:repeat, dial:<why>)", lab + ["what"], registry=r)
        self.gossip = Counter("swarm_gossip_messages_total", "Gossiped announcements: received, offered (valid and "
                              "new), published, publish_failures", lab + ["what"], registry=r)
        self.pubsub = Gauge("swarm_gossip_running", "1 while announcements travel by gossip (pubsub running), 0 on "
                            "the DHT alone", lab, registry=r)
        self.poll_only = Gauge("swarm_gossip_poll_only_peers", "Peers seen only by DHT polling lately (gossip never "
                               "delivered from them); while > 0 the DHT is read every interval (mode mixed)", lab,
                               registry=r)
        self.gather_latency = Histogram("swarm_gather_seconds", "Seconds a round waited for peers' groups", lab, registry=r)
        self.peers_seen = Gauge("swarm_peers_seen", "Peers with a fresh valid announcement", lab, registry=r)
        self.peers = Gauge("swarm_peers", "Peers seen, by standing (good: waited for and fetched first; new; "
                           "backoff)", lab + ["state"], registry=r)
        self.downloaded = Counter("swarm_bytes_downloaded_total", "Bundle bytes fetched from peers", lab, registry=r)
        self.skipped = Counter("swarm_announcements_skipped_total", "Valid announcements not fetched (fan-in budget)",
                               lab, registry=r)
        self.step_s = Gauge("swarm_step_seconds", "Train step seconds", lab, registry=r)
        self.tokens_per_s = Gauge("swarm_generation_tokens_per_second", "Generation tokens/s", lab, registry=r)
        self.is_mean = Gauge("swarm_is_weight_mean", "Mean importance weight", lab, registry=r)
        self.is_max = Gauge("swarm_is_weight_max", "Max importance weight", lab, registry=r)
        # what `swarm plot` and the dashboard draw (ops.dashboard; deploy/grafana)
        self.eval_se = Gauge("swarm_eval_accuracy_se", "Standard error of the held-out accuracy", lab, registry=r)
        self.loss = Gauge("swarm_loss", "Training loss of the round's step", lab, registry=r)
        self.kl = Gauge("swarm_kl_to_sampler", "k3 estimate of KL(sampler || policy) on own / peers' tokens",
                        lab + ["source"], registry=r)
        self.trained = Gauge("swarm_groups_trained", "Groups trained on in the round, own / peers'", lab + ["source"],
                             registry=r)
        self.is_ext = Gauge("swarm_is_weight_external", "Mean importance weight on peers' rows", lab, registry=r)
        peer = lab + ["peer"]
        self.peer_received = Counter("swarm_peer_groups_received_total", "Peer's groups accepted", peer, registry=r)
        self.peer_used = Counter("swarm_peer_groups_used_total", "Peer's groups trained on", peer, registry=r)
        self.peer_dropped = Counter("swarm_peer_records_dropped_total", "Peer's records dropped", peer + ["reason"],
                                    registry=r)
        self._peer_series: OrderedDict[str, tuple[float, set]] = OrderedDict()  # peer → (last seen, its label sets)
        self.peer_seen = Gauge("swarm_peer_last_seen_timestamp_seconds", "When the peer's records last arrived",
                               peer, registry=r)
        self.peer_model = Gauge("swarm_peer_info", "1 per peer, with the model its records name", peer + ["model"],
                                registry=r)

    def identify(self, peer_id: str, model: str) -> None:
        self.info.labels(self.node, peer_id, model[:64]).set(1)

    def serve(self, port: int, host: str) -> int:
        server, _ = start_http_server(port, addr=host, registry=self.registry)
        return server.server_port

    def observe(self, rec: RoundRecord, peer_stats: dict[str, dict] | None = None) -> None:
        """One round's record; `peer_stats`: its per-peer table as the line keeps it (bounded_peer_stats)."""
        n, gen, ex, ev = self.node, rec.generation, rec.exchange, rec.eval
        self.rounds.labels(n).inc()
        if gen.reward_mean is not None:  # None: a learner that received nothing this round
            self.reward.labels(n).set(gen.reward_mean)
            self.accuracy.labels(n).set(gen.accuracy)
        if ev.eval_accuracy_before is not None:  # the baseline: the held-out panel has a point from round 0
            self.eval_before.labels(n).set(ev.eval_accuracy_before)
            self.eval_accuracy.labels(n).set(ev.eval_accuracy_before)
            if ev.eval_se_before is not None:
                self.eval_se.labels(n).set(ev.eval_se_before)
        if ev.eval_accuracy is not None:
            self.eval_accuracy.labels(n).set(ev.eval_accuracy)
        self.published.labels(n).inc(ex.groups_published)
        self.received.labels(n).inc(ex.groups_received)
        for reason, count in ex.drops.items():
            self.dropped.labels(n, reason).inc(count)
        for what, count in (ex.refused or {}).items():
            self.refused.labels(n, what).inc(count)
        gossip = ex.gossip or {}
        for what in ("received", "offered", "published", "publish_failures"):
            if gossip.get(what):
                self.gossip.labels(n, what).inc(gossip[what])
        if ex.announce_transport:
            self.pubsub.labels(n).set(ex.announce_transport == "gossip")
        if "poll_only_peers" in gossip:
            self.poll_only.labels(n).set(gossip["poll_only_peers"])
        self.wire_bytes.labels(n).inc(ex.wire_bytes)
        if ex.gather_s is not None:
            self.gather_latency.labels(n).observe(ex.gather_s)
        self.peers_seen.labels(n).set(rec.peers.peers_seen)
        for state, count in (("good", rec.peers.peers_good), ("new", rec.peers.peers_new),
                             ("backoff", rec.peers.peers_backoff)):
            self.peers.labels(n, state).set(count)
        self.downloaded.labels(n).inc(ex.bytes_downloaded)
        self.skipped.labels(n).inc(ex.fanin_skipped)
        self.step_s.labels(n).set(rec.step.step_s)
        self.tokens_per_s.labels(n).set(gen.tokens_per_s)
        m = rec.metrics
        self.is_mean.labels(n).set(1.0 if m.is_weight_mean is None else m.is_weight_mean)
        self.is_max.labels(n).set(1.0 if m.is_weight_max is None else m.is_weight_max)
        self._observe_plot(rec, rec.peers.peer_stats if peer_stats is None else peer_stats)

    def _observe_plot(self, rec: RoundRecord, peer_stats: dict[str, dict]) -> None:
        n, step, m = self.node, rec.step, rec.metrics
        if rec.eval.eval_se is not None:
            self.eval_se.labels(n).set(rec.eval.eval_se)
        if rec.trained:
            self.loss.labels(n).set(m.loss or 0.0)
            for source, value in (("own", m.kl_beh_local), ("peers", m.kl_beh_external)):
                if value is not None and (source == "own" or step.groups_external):
                    self.kl.labels(n, source).set(value)
        self.trained.labels(n, "own").set(step.groups_local)
        self.trained.labels(n, "peers").set(step.groups_external)
        if step.groups_external and m.is_weight_external is not None:
            self.is_ext.labels(n).set(m.is_weight_external)
        now = rec.time
        for peer, st in (peer_stats or {}).items():
            if peer == OTHER_PEERS:
                continue  # the sum of the peers a metrics line leaves out (bounded_peer_stats): no series of its own
            series = self._peer_entry(peer, now)
            self.peer_received.labels(n, peer).inc(st.get("received", 0))
            self.peer_used.labels(n, peer).inc(st.get("used", 0))
            for reason, count in st.get("dropped", {}).items():
                self.peer_dropped.labels(n, peer, reason).inc(count)
                series.add((self.peer_dropped, (n, peer, reason)))
            if st.get("received") or st.get("dropped"):
                self.peer_seen.labels(n, peer).set(now)
            if st.get("model") and not any(metric is self.peer_model for metric, _ in series):
                model = str(st["model"])[:64]  # one series per peer, whatever it sends later
                self.peer_model.labels(n, peer, model).set(1)
                series.add((self.peer_model, (n, peer, model)))

    def _peer_entry(self, peer: str, now: float) -> set:
        """The label sets of `peer`'s series, marked seen now; the series of peers not seen within PEER_SERIES_S, and
        beyond MAX_PEER_SERIES those seen least recently, are removed (identities are free: /metrics stays bounded)."""
        _, series = self._peer_series.pop(peer, (now, None))
        if series is None:
            series = {(metric, (self.node, peer)) for metric in
                      (self.peer_received, self.peer_used, self.peer_seen)}
        self._peer_series[peer] = (now, series)
        while self._peer_series and (len(self._peer_series) > MAX_PEER_SERIES
                                     or next(iter(self._peer_series.values()))[0] < now - PEER_SERIES_S):
            _, (_, old) = self._peer_series.popitem(last=False)
            for metric, labels in old:
                try:
                    metric.remove(*labels)
                except KeyError:  # never set
                    pass
        return series


def write_json(path: Path, value: Any) -> None:
    """Atomically: a reader (`swarm dashboard`) sees the old file or the new one, never half of it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, indent=1, sort_keys=False) + "\n")
    tmp.replace(path)


class MetricsLog:
    """metrics.jsonl, /metrics, the console line and the trackers; also, for `swarm dashboard` (ops.dashboard),
    the run dir's config.json (the resolved config) and node.json (the node's name, peer id and model)."""

    def __init__(self, out_dir: Path, node: str, cfg: MetricsConfig, stream: TextIO = sys.stdout,
                 run_config: dict[str, Any] | None = None, identity: dict[str, Any] | None = None):
        self.path = out_dir / "metrics.jsonl"
        self.cfg = cfg
        self.stream = stream
        self.prom = Prom(node)
        self.port = self.prom.serve(cfg.prometheus_port, cfg.prometheus_host) if cfg.prometheus_port is not None else None
        self.trackers = build_trackers(cfg, out_dir, node, run_config)
        if run_config is not None:
            write_json(out_dir / "config.json", run_config)
        if identity is not None:  # {"name", "peer_id" (null without a swarm), "model"}
            write_json(out_dir / "node.json", identity)
            if identity.get("peer_id"):
                self.prom.identify(identity["peer_id"], str(identity.get("model") or ""))
        self._start: dict[str, Any] = {"start": "fresh"}

    def mark_resumed(self, checkpoint: str = "", next_round: int | None = None) -> None:
        """The next line starts a resumed run. Lines of rounds from `next_round` on (written after the checkpoint
        this run resumes from, by a process killed before its next checkpoint) are removed first, and so is a
        line cut short by the kill: those rounds are run again, and each round keeps one line."""
        self._start = {"start": "resumed", "start_from": checkpoint, "resumed": True}
        if next_round is None or not self.path.exists():
            return
        kept = []
        for line in self.path.read_text().splitlines():
            try:
                if json.loads(line)["round"] < next_round:
                    kept.append(line)
            except (ValueError, KeyError, TypeError):  # cut short by the kill (or not a line of ours)
                continue
        tmp = self.path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(line + "\n" for line in kept))
        tmp.replace(self.path)

    def write(self, rec: RoundRecord) -> None:
        m = {**rec.line(), **self._start}
        self._start = {}
        stats = bounded_peer_stats(rec.peers.peer_stats) if rec.peers.peer_stats else rec.peers.peer_stats
        m["peer_stats"] = stats
        line = bounded_line(m)
        with open(self.path, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.prom.observe(rec, stats)
        if self.trackers:
            scalars = scalars_of(m)
            for t in self.trackers:
                t.log(rec.round, scalars, rec.time)
        if self.cfg.console:
            print(progress_line(rec), file=self.stream, flush=True)

    def close(self) -> None:
        for t in self.trackers:
            t.close()
        self.trackers = []


def bounded_peer_stats(stats: dict[str, dict]) -> dict[str, dict]:
    """A round's per-peer tallies as a metrics line keeps them: the MAX_PEER_STATS most active peers, and the rest
    summed under OTHER_PEERS (with "peers": how many) — peers are free identities, a line must stay bounded."""
    if len(stats) <= MAX_PEER_STATS:
        return stats

    def activity(item) -> tuple:
        st = item[1]
        return (-(st.get("used") or 0), -(st.get("received") or 0), -sum((st.get("dropped") or {}).values()))
    ranked = sorted(stats.items(), key=activity)
    rest = ranked[MAX_PEER_STATS:]
    dropped: dict[str, int] = {}
    for _, st in rest:
        for reason, n in (st.get("dropped") or {}).items():
            dropped[reason] = dropped.get(reason, 0) + n
    other = {"model": "", "received": sum(st.get("received") or 0 for _, st in rest),
             "used": sum(st.get("used") or 0 for _, st in rest), "dropped": dropped, "peers": len(rest)}
    return {**dict(ranked[:MAX_PEER_STATS]), OTHER_PEERS: other}


def bounded_line(m: dict[str, Any]) -> str:
    """The JSON line of `m`, at most MAX_LINE_BYTES: a line that would be longer (a bug, or a field a peer could
    fill) keeps its numbers and loses its per-peer table and every long string, and says so (`truncated`)."""
    line = json.dumps(m, sort_keys=True)
    if len(line.encode()) <= MAX_LINE_BYTES:
        return line
    short = {k: (v[:256] if isinstance(v, str) else v) for k, v in m.items()
             if not isinstance(v, (dict, list)) or len(json.dumps(v)) <= 4096}
    short["truncated"] = sorted(set(m) - set(short))
    line = json.dumps(short, sort_keys=True)
    return line if len(line.encode()) <= MAX_LINE_BYTES else json.dumps(
        {k: short[k] for k in ("node", "round", "time", "truncated") if k in short}, sort_keys=True)


def progress_line(rec: RoundRecord) -> str:
    gen, step, m, peers, mode = rec.generation, rec.step, rec.metrics, rec.peers, rec.mode
    ev = rec.eval.eval_accuracy
    parts = [
        f"[{rec.node}] round {rec.round:>4}",
        f"reward {gen.reward_mean:.3f}" if gen.reward_mean is not None else "reward   -  ",
        f"acc {gen.accuracy:.3f}" if gen.accuracy is not None else "acc   -  ",
        f"eval {ev:.3f}" if ev is not None else "eval   -  ",
        f"groups {step.groups_local}+{step.groups_external}",
        f"loss {m.loss:+.4f}" if rec.trained else "no step    ",
        f"{gen.tokens_per_s:.0f} tok/s",
        f"round {rec.round_s:.1f}s",
    ]
    if gen.decode not in (None, "eager: no CUDA"):  # on a GPU: graphs, or eager and why (a CPU is always eager)
        parts.append(f"decode {gen.decode}")
    parts += mode_notes(mode)
    if peers.peers_backoff or peers.peers_new:  # standing, when not every peer seen is in good standing
        parts.append(f"peers {peers.peers_good} good / {peers.peers_new} new / {peers.peers_backoff} backed off")
    if rec.exchange.peer_groups_note:
        parts.append(f"no peer groups: {rec.exchange.peer_groups_note}")
    drops = sum(rec.exchange.drops.values())
    if drops:
        parts.append(f"dropped {drops}")
    return " | ".join(parts)


def mode_notes(mode: dict[str, Any]) -> list[str]:
    """What the console line says about a mode's fields (heterorl: weights, staleness; federated: public, averaging)."""
    out = []
    if mode.get("weights_loaded"):
        out.append(f"weights v{mode['weights_version']} loaded")
    if mode.get("staleness_max") is not None:
        out.append(f"staleness p50 {mode['staleness_p50']} max {mode['staleness_max']}")
    if mode.get("public"):
        out.append("public step")
    if "avg_averaged" in mode:  # federated averaging boundary
        out.append(f"averaged with {mode['avg_group_size'] - 1} peers, drift {mode['avg_drift']:.3f}"
                   if mode["avg_averaged"] else "averaging failed")
    return out
