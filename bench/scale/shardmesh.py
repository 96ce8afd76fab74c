"""Announcement shards in the scale simulation: one gossipsub mesh (bench.scale.mesh.Mesh) per topic, over the peers
that subscribe to it, with the topics each peer subscribes to and publishes on taken from the project's own
swarm.exchange.shards.ShardPlan.

REAL: swarm.exchange.shards.ShardPlan — every peer's level (from its estimate of the swarm's size), home shard,
nested shards one level either way and rotating extra shard (protocols.keys.ann_shard / ann_topic underneath).
MODELLED: every peer's estimate is the swarm's true size (the DHT estimate of swarm.dht.size is not simulated: its
noise, ± 1 / √8, would put some peers one level off, which the nesting covers), so every peer has the same level
and the topics one level above and below carry no messages (they cost their meshes' GRAFTs, which are counted);
no peer of the previous version (the legacy topic is left out); a run is shorter than a rotation (600 s), so each
peer's extra shard is the one of its first moment. Each topic's mesh is a Mesh of its own over its subscribers
(its connections are dialled among them: a peer dials peers of its shards, as swarm.exchange.gossip does for thin
shards), with the per-hop and per-byte model of bench.scale.mesh. A peer's bytes and control messages are the sum
over its topics; a message is offered to an observer once, at its first arrival over any topic.
"""

from __future__ import annotations

import math
import random

import numpy as np

from bench.scale.mesh import DELAY_BINS, Mesh
from swarm.exchange.shards import ShardPlan

VERSION = 2


class TopicMeshes:
    """Every topic's mesh; the interface of bench.scale.mesh.Mesh that bench.scale.gossipsim uses (join, leave,
    heartbeat, publish, last_arrival, up, down, row)."""

    def __init__(self, world, rng: random.Random, horizon_s: float, msg_bytes: int, *, per_shard: int, extra: int,
                 t0: float):
        self.n = n = len(world)
        self.plans = [ShardPlan(p.peer_id, "sim", VERSION, per_shard=per_shard, extra=extra) for p in world]
        for plan in self.plans:
            plan.estimate(n)  # every peer's estimate right (module docstring)
        self.level = self.plans[0].level
        members: dict[str, list[int]] = {}
        self.topics_of: list[list[str]] = []
        for i, plan in enumerate(self.plans):
            topics = [t for t in plan.subscriptions(t0) if t != plan.legacy]
            self.topics_of.append(topics)
            for t in topics:
                members.setdefault(t, []).append(i)
        self.home = [plan.home for plan in self.plans]
        self.meshes: dict[str, Mesh] = {}
        self.members: dict[str, np.ndarray] = {}
        self.local: dict[str, dict[int, int]] = {}
        for t, idx in members.items():
            self.meshes[t] = Mesh([world[i] for i in idx], rng, horizon_s, msg_bytes)
            self.members[t] = np.array(idx, np.int64)
            self.local[t] = {g: k for k, g in enumerate(idx)}
        self.last_arrival = np.full(n, -math.inf)

    # ------------------------------------------------------------------ sessions and heartbeats
    def join(self, i: int) -> None:
        self.last_arrival[i] = -math.inf
        for t in self.topics_of[i]:
            self.meshes[t].join(self.local[t][i])

    def leave(self, i: int) -> None:
        for t in self.topics_of[i]:
            self.meshes[t].leave(self.local[t][i])

    def heartbeat(self, tick: int, counting: bool) -> None:
        for mesh in self.meshes.values():
            mesh.heartbeat(tick, counting)

    # ------------------------------------------------------------------ one message
    def publish(self, p: int, t: float, counting: bool) -> np.ndarray:
        """Arrival delays at every peer (inf: not reached) of a message p publishes on its home shard at t."""
        topic = self.home[p]
        arr = np.full(self.n, np.inf)
        mesh = self.meshes[topic]
        local = mesh.publish(self.local[topic][p], t, counting)
        arr[self.members[topic]] = local
        got = np.flatnonzero(np.isfinite(arr))
        self.last_arrival[got] = np.maximum(self.last_arrival[got], t + arr[got])
        return arr

    # ------------------------------------------------------------------ per peer, summed over its topics
    def _sum(self, name: str) -> np.ndarray:
        out = np.zeros(self.n)
        for t, mesh in self.meshes.items():
            out[self.members[t]] += getattr(mesh, name)
        return out

    @property
    def up(self) -> np.ndarray:
        return self._sum("up")

    @property
    def down(self) -> np.ndarray:
        return self._sum("down")

    def row(self, honest: np.ndarray, online_s: np.ndarray, measure_s: float) -> dict:
        stats: dict[str, int] = {}
        delays = np.zeros(DELAY_BINS + 1, np.int64)
        for mesh in self.meshes.values():
            for k, v in mesh.stats.items():
                stats[k] = stats.get(k, 0) + v
            delays += mesh.delays
        rpcs_in, up = self._sum("rpcs_in"), self._sum("up")
        up_bps = np.zeros(self.n)
        for t, mesh in self.meshes.items():
            up_bps[self.members[t]] = mesh.up_bps
        full = honest & (online_s >= measure_s)
        cum = np.cumsum(delays)

        def pct(q: float) -> float | None:
            return float(np.searchsorted(cum, q * cum[-1]) + 1) * 0.01 if cum[-1] else None
        degrees = [len(m.mesh[i]) for m in self.meshes.values() for i in np.flatnonzero(m.online)]
        sizes = [len(v) for v in self.members.values()]
        busy = [t for t in self.meshes if self.plans[0].shard_of_topic(t)[0] == self.level]
        return {"p50_gossip_arrival_s": pct(0.5), "p95_gossip_arrival_s": pct(0.95), "p99_gossip_arrival_s": pct(0.99),
                "gossip_reach": stats["reached"] / stats["subscribers"] if stats["subscribers"] else None,
                "gossip_copies_per_delivery": stats["copies"] / stats["reached"] if stats["reached"] else None,
                "gossip_by_iwant_share": stats["by_iwant"] / stats["reached"] if stats["reached"] else None,
                "gossip_messages": stats["messages"], "gossip_iwant": stats["iwant"],
                "gossip_ihave_ids_per_ihave": stats["ihave_ids"] / stats["ihaves"] if stats["ihaves"] else None,
                "gossip_grafts": stats["grafts"], "gossip_prunes": stats["prunes"],
                "gossip_rpcs_in_per_s_max": float((rpcs_in[full] / measure_s).max()) if full.any() else None,
                "gossip_upload_saturated_share": float((up[full] / np.maximum(online_s[full], 1e-9) > up_bps[full]).mean())
                if full.any() else None,
                "mesh_degree_mean": float(np.mean(degrees)) if degrees else None,
                "ann_level": self.level, "ann_topics": len(self.meshes),
                "ann_topics_per_peer": float(np.mean([len(ts) for ts in self.topics_of])),
                "ann_shard_subscribers_mean": float(np.mean([len(self.members[t]) for t in busy])) if busy else None,
                "ann_topic_subscribers_max": max(sizes) if sizes else 0}
