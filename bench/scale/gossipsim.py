"""The `gossip` setting of the scale simulation: the exchange of bench.scale.sim with announcements also gossiped
over the modelled gossipsub mesh of bench.scale.mesh, as swarm.exchange.gossip runs them.

REAL (besides what bench.scale.sim calls):
    swarm.exchange.inbox      Inbox.offer(value, sender, now=...) for every gossiped message that reaches an
                              observer (each message once: the daemon drops duplicates), then Inbox.choose when
                              one was new, as swarm.exchange.gossip does; the messages that reach an observer
                              within one BATCH_S slot are offered at its end, then one choice runs (the node
                              chooses after each message: at 1,000 peers and more, a choice per message would
                              spend most of the simulation's time in Inbox.choose)
    swarm.exchange.receive    vet_announcement: whether a message that was not new is still a valid one
    swarm.exchange.poller     PollGate(gossip_poll_every, gossip_quiet_polls, poll_interval_s).due(last, now): every
                              poll interval of every peer asks it whether to read the DHT (the config's defaults,
                              read off swarm.config.SwarmConfig)
    swarm.exchange.shards     ShardPlan, with `Setting.sharded`: each peer's announcement-shard topics (one mesh per
                              topic, bench.scale.shardmesh)
What a publish does: the DHT store as before (every peer still stores), the notify pushes as before, and one
gossipsub message (bench.scale.mesh.Mesh.publish; sharded: on the publisher's home shard's mesh). Ghost peers gossip their throwaway identities' announcements
too (signed by each identity's own key, so the daemons relay them). Client-mode peers subscribe and forward but
never publish (their bundles travel by push). For an observer "gossip delivered" is the time of its last valid
gossiped announcement, as swarm.exchange.gossip keeps it; for the other peers it is the arrival time of the latest
message the mesh brought them. Peers online at t = 0 start with their catch-up reads done (a swarm already
running; in the DHT settings those reads end within the warm-up, gated they would last gossip_poll_every times
longer and fall into the measured part); peers that join later catch up, gated, as the real poller does.
"""

from __future__ import annotations

import math

import numpy as np

from bench.scale.mesh import PUBSUB_FRAMING, Mesh
from bench.scale.model import Costs, Setting
from bench.scale.shardmesh import TopicMeshes
from bench.scale.sim import T0, Simulation
from protocols.codec import RecordError
from swarm.exchange.poller import PollGate
from swarm.exchange.receive import vet_announcement

BATCH_S = 0.1  # gossiped messages reaching one observer within the same 0.1 s are offered together


class GossipSimulation(Simulation):
    """bench.scale.sim.Simulation with gossipsub beside the DHT (module docstring)."""

    def __init__(self, setting: Setting, costs: Costs):
        super().__init__(setting, costs)
        horizon = setting.warmup_s + setting.measure_s
        msg_bytes = costs.announcement_bytes + PUBSUB_FRAMING
        self.mesh = TopicMeshes(self.world, self.rng, horizon, msg_bytes, per_shard=setting.per_shard,
                                extra=setting.extra_shards, t0=T0) if setting.sharded else \
            Mesh(self.world, self.rng, horizon, msg_bytes)
        self.observer_idx = np.array(sorted(i for i, nd in enumerate(self.nodes) if nd.observer), np.int64)
        self.batches: dict[tuple[int, float], list[tuple[str, bytes]]] = {}  # (observer, when) → gossiped messages
        self.at(1.0, self.heartbeat, 1)

    def join(self, node) -> None:
        super().join(node)
        cfg = self.cfg
        node.gate = PollGate(cfg.gossip_poll_every, cfg.gossip_quiet_polls, cfg.poll_interval_s)
        node.last_gossip = None
        if self.now == 0.0:  # a swarm already running: its catch-up reads are over (the DHT settings end theirs
            node.plan.catch_up = []  # within the warm-up; gated, they would run gossip_poll_every times longer)
        self.mesh.join(node.w.idx)

    def leave(self, node) -> None:
        super().leave(node)
        self.mesh.leave(node.w.idx)

    def heartbeat(self, tick: int) -> None:
        self.mesh.heartbeat(tick, self.tally.measuring)
        self.at(self.now + 1.0, self.heartbeat, tick + 1)

    def poll_due(self, node) -> bool:
        """The real PollGate decides whether this poll interval reads the DHT."""
        if node.observer:
            last = node.last_gossip
        else:
            t = float(self.mesh.last_arrival[node.w.idx])
            last = t if t > -np.inf else None
        due = node.gate.due(last, self.now)
        if self.tally.measuring and not node.w.hostile:
            self.tally.c["polls_read" if due else "polls_skipped"] += 1
        return due

    def store(self, node, key: str, signer: str, value: bytes, expiration: float) -> None:
        """The DHT store as before, and the message gossiped (swarm.exchange.gossip publishes when the store starts)."""
        super().store(node, key, signer, value, expiration)
        i = node.w.idx
        arr = self.mesh.publish(i, self.now, self.tally.measuring)
        obs = self.observer_idx
        reached = obs[np.isfinite(arr[obs]) & (obs != i)]
        for o, delay in zip(reached.tolist(), arr[reached].tolist()):
            due = math.ceil((self.now + delay) / BATCH_S) * BATCH_S
            batch = self.batches.get((o, due))
            if batch is None:
                nd = self.nodes[o]
                batch = self.batches[(o, due)] = []
                self.at(due, self.gossiped, nd, nd.epoch, due)
            batch.append((signer, value))

    def gossiped(self, node, epoch: int, due: float) -> None:
        """The gossiped messages that reached an observer in one batch: what swarm.exchange.gossip does with each,
        then the fan-in choice once if any was new."""
        batch = self.batches.pop((node.w.idx, due))
        if epoch != node.epoch or not self.online(node.w.idx):
            return
        now, new = node.clock(self.now), False
        if self.tally.measuring and not node.w.hostile:
            self.tally.c["gossip_offers"] += len(batch)
        for signer, value in batch:
            if node.inbox.offer(value, signer, now=now):
                node.last_gossip, new = self.now, True
                continue
            try:
                vet_announcement(value, signer, node.inbox.limits, now=now)
            except RecordError:
                continue
            node.last_gossip = self.now
        if new:
            self.choose(node)  # the fan-in choice, as for a pushed announcement

    def run(self):
        tally = super().run()
        s = self.setting
        lo, hi = s.warmup_s, s.warmup_s + s.measure_s
        honest = np.array(tally.honest)
        online_s = np.array([sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in p.sessions) for p in self.world])
        tally.c["up_gossip"] = float(self.mesh.up[honest].sum())
        tally.c["down_gossip"] = float(self.mesh.down[honest].sum())
        self.mesh_row = self.mesh.row(honest, online_s, s.measure_s)
        return tally


def simulate_gossip(setting: Setting, costs: Costs) -> dict:
    sim = GossipSimulation(setting, costs)
    row = sim.run().row(sim)
    c = sim.tally.c
    polls = c["polls_read"] + c["polls_skipped"]
    row.update(sim.mesh_row, dht_polls_skipped_share=c["polls_skipped"] / polls if polls else None,
               gossip_offers=c["gossip_offers"])
    return row
