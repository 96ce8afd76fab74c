"""The gossipsub mesh of the scale simulation's `gossip` setting: who is connected to whom, who is in whose mesh,
when each message reaches each peer, and the bytes every copy and every control message costs.

Modelled after go-libp2p-pubsub v1.1 with the defaults p2pd runs (GossipSubDefaultParameters):
    mesh        D = 6, Dlo = 5, Dhi = 12; a heartbeat every 1 s grafts connected topic peers into a mesh
                below Dlo (up to D; a GRAFT is accepted, so both sides add the edge) and prunes a mesh above
                Dhi at random down to D; a peer that leaves drops out of every mesh at once (its connections
                close), a peer that joins has an empty mesh until the next heartbeat
    connections every peer subscribes to the one announcement topic; the topic peers a peer is connected to
                are bounded to what it dials itself, DIALS = 8 random online reachable peers at its start (and
                again at a heartbeat while it holds fewer), plus the peers that dialled it: about 16 per peer,
                the mesh among them (a real daemon is also connected to its DHT peers, all subscribed, so a
                real flood publish reaches more peers than here); client-mode (NAT) peers dial out, nobody
                dials them
    publish     flood publish: the publisher sends its message to every connected topic peer
    forward     a peer forwards a message it sees first to its mesh peers, except the one it came from and
                its author (so every mesh edge the message did not cross first carries a second copy: the
                duplicates); one hop = half the path RTT (bench.scale.model: the mean of the two access RTTs)
                + the message's bytes at the sender's upload + HOP_S of daemon time; no queueing, no loss
    lazy gossip at each heartbeat (phase per peer) a peer sends IHAVE to D_LAZY = 6 of its connected non-mesh
                topic peers (GossipFactor 0.25 of ~10 candidates is below D_LAZY), listing the message ids it
                received within the last GOSSIP_WINDOW = 3 heartbeats (mcache history_gossip; at most
                MAX_IHAVE_LENGTH = 5000); a peer that has not seen an id when the IHAVE arrives sends IWANT and
                gets the message (a copy again if the mesh copy wins the race); a peer reached this way
                forwards on its mesh. The gossip targets a message meets are those drawn at the latest
                heartbeat (re-drawn every heartbeat), and only its first heartbeat's IHAVE can pull it
    bytes       a message = the announcement + PUBSUB_FRAMING (RSA keys: the 256-byte signature and the
                public key ride in every message, the peer id being a hash of it); a message id MSG_ID_BYTES;
                an IHAVE or IWANT or GRAFT/PRUNE adds CONTROL_FRAMING. Every copy a peer sends counts up, every
                copy it receives counts down; the IHAVE ids count whether or not the receiver has the message
Left out: peer scoring (and its gossip/publish thresholds), IDONTWANT (v1.2), PRUNE backoff and peer exchange,
opportunistic grafting, Dout/Dscore in pruning, fanout (every publisher is subscribed), the seen-cache TTL,
outbound queue limits and drops on slow links (a peer whose upload cannot carry its share is reported, not
slowed), GossipRetransmission limits, and IHAVE floods by hostile peers.

Propagation is computed per message on the mesh at publish time (scipy's Dijkstra over a graph whose extra
node per publisher carries the flood publish), then corrected for IWANT pulls; the first-arrival times it
gives are exact for fixed per-hop delays on that mesh.
"""

from __future__ import annotations

import math
import random

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra

D, D_LO, D_HI, D_LAZY = 6, 5, 12, 6
HEARTBEAT_S = 1.0
GOSSIP_WINDOW = 3  # mcache history_gossip: heartbeats whose message ids an IHAVE lists
MAX_IHAVE_LENGTH = 5000
DIALS = 8
HOP_S = 0.002
MSG_ID_BYTES = 44  # DefaultMsgIdFn: from (34-byte RSA peer id multihash) + 8-byte seqno, + a protobuf tag
# over the announcement: from 36, seqno 10, topic 24, signature (RSA-2048) 259, key (PublicKey{RSA, SPKI DER}) 302,
# Message + RPC tags 6, noise + yamux frame 28
PUBSUB_FRAMING = 36 + 10 + 24 + 259 + 302 + 6 + 28
CONTROL_FRAMING = 70  # one control message: topic, tags, RPC, noise + yamux
DELAY_BIN_S, DELAY_BINS = 0.01, 6000  # publish → arrival histogram (the last bin: 60 s or more)


class Mesh:
    """The topic's connections, meshes and counters over one simulated run (module docstring)."""

    def __init__(self, world, rng: random.Random, horizon_s: float, msg_bytes: int):
        n = self.n = len(world)
        self.rng = rng
        self.msg_bytes = msg_bytes
        self.rtt = np.array([p.rtt_s for p in world])
        self.up_bps = np.array([p.up_bps for p in world])
        self.dialable = np.array([not p.nat for p in world])
        self.phase = np.array([rng.random() * HEARTBEAT_S for _ in world])
        self.online = np.zeros(n, bool)
        self.conn: list[set[int]] = [set() for _ in range(n)]
        self.mesh: list[set[int]] = [set() for _ in range(n)]
        self.last_arrival = np.full(n, -math.inf)  # sim time of the latest message that reached each peer
        self.recv_bins = np.zeros((n, int(horizon_s / HEARTBEAT_S) + GOSSIP_WINDOW + 2), np.int32)
        self.up = np.zeros(n)  # bytes sent / received while counting
        self.down = np.zeros(n)
        self.rpcs_in = np.zeros(n)  # messages and control messages received while counting
        self.delays = np.zeros(DELAY_BINS + 1, np.int64)  # first-arrival delays while counting, DELAY_BIN_S bins
        self.g_src = self.g_dst = np.zeros(0, np.int64)  # the latest heartbeat's IHAVE edges
        self.stats = dict.fromkeys(("messages", "subscribers", "reached", "by_iwant", "copies", "ihaves",
                                    "ihave_ids", "iwant", "grafts", "prunes"), 0)
        self._graph = None

    # ------------------------------------------------------------------ sessions and heartbeats
    def join(self, i: int) -> None:
        self.online[i] = True
        self.last_arrival[i] = -math.inf
        self._dial(i, DIALS)
        self._graph = None

    def leave(self, i: int) -> None:
        self.online[i] = False
        for j in self.conn[i]:
            self.conn[j].discard(i)
            self.mesh[j].discard(i)
        self.conn[i].clear()
        self.mesh[i].clear()
        self._graph = None

    def _dial(self, i: int, k: int) -> None:
        targets = np.flatnonzero(self.online & self.dialable)
        if len(targets) <= 1:
            return
        for _ in range(4 * k):
            if k <= 0:
                break
            j = int(targets[self.rng.randrange(len(targets))])
            if j != i and j not in self.conn[i]:
                self.conn[i].add(j)
                self.conn[j].add(i)
                k -= 1

    def heartbeat(self, tick: int, counting: bool) -> None:
        """Every online peer's heartbeat (at its own phase within the second; modelled at the tick): connections
        topped up, the mesh grafted or pruned, IHAVE sent to D_LAZY connected non-mesh peers."""
        rng, changed = self.rng, False
        ids = self.recv_bins[:, max(0, tick - GOSSIP_WINDOW):tick].sum(axis=1).clip(max=MAX_IHAVE_LENGTH)
        src, dst = [], []
        for u in np.flatnonzero(self.online).tolist():
            if len(self.conn[u]) < DIALS:
                self._dial(u, DIALS - len(self.conn[u]))
                changed = True
            mesh, conn = self.mesh[u], self.conn[u]
            if len(mesh) < D_LO:
                pool = list(conn - mesh)
                for v in rng.sample(pool, min(D - len(mesh), len(pool))):
                    mesh.add(v)
                    self.mesh[v].add(u)
                    self._control(u, v, counting, "grafts")
                    changed = True
            elif len(mesh) > D_HI:
                for v in rng.sample(sorted(mesh), len(mesh) - D):
                    mesh.discard(v)
                    self.mesh[v].discard(u)
                    self._control(u, v, counting, "prunes")
                    changed = True
            pool = list(conn - mesh)
            for v in rng.sample(pool, min(D_LAZY, len(pool))) if ids[u] else ():
                src.append(u)
                dst.append(v)
        self.g_src, self.g_dst = np.array(src, np.int64), np.array(dst, np.int64)
        if changed:
            self._graph = None
        if counting and len(src):
            nbytes = ids[self.g_src] * MSG_ID_BYTES + CONTROL_FRAMING
            self.up += np.bincount(self.g_src, nbytes, self.n)
            self.down += np.bincount(self.g_dst, nbytes, self.n)
            self.rpcs_in += np.bincount(self.g_dst, minlength=self.n)
            self.stats["ihave_ids"] += int(ids[self.g_src].sum())
            self.stats["ihaves"] += len(src)

    def _control(self, u: int, v: int, counting: bool, kind: str) -> None:
        if counting:
            self.up[u] += CONTROL_FRAMING
            self.down[v] += CONTROL_FRAMING
            self.rpcs_in[v] += 1
            self.stats[kind] += 1

    # ------------------------------------------------------------------ one message
    def _build(self):
        n = self.n
        pairs = [(u, v) for u in range(n) for v in self.mesh[u]]
        flood = [(n + u, v) for u in np.flatnonzero(self.online).tolist() for v in self.conn[u]]
        ms = np.array([p[0] for p in pairs], np.int64)
        md = np.array([p[1] for p in pairs], np.int64)
        fs = np.array([p[0] for p in flood], np.int64)
        fd = np.array([p[1] for p in flood], np.int64)
        src, dst = np.concatenate([ms, fs]), np.concatenate([md, fd])
        w = self.hop(src % n, dst)
        g = csr_matrix((w, (src, dst)), shape=(2 * n, 2 * n))
        self._graph = (g, ms, md)
        return self._graph

    def hop(self, a, b):
        """One hop's delay from a to b: half the path RTT, the message at a's upload, the daemon's time."""
        return (self.rtt[a] + self.rtt[b]) / 4 + self.msg_bytes / self.up_bps[a] + HOP_S

    def publish(self, p: int, t: float, counting: bool) -> np.ndarray:
        """Arrival delays (s after t) of a message p publishes at sim time t at every peer (inf: not reached)."""
        n = self.n
        g, ms, md = self._graph or self._build()
        dist, pred = dijkstra(g, directed=True, indices=n + p, return_predecessors=True)
        arr, pred = dist[:n].copy(), pred[:n].copy()
        pred[pred >= n] -= n
        arr[p], pred[p] = 0.0, -1
        self._pull(p, t, arr, pred, g, counting)
        got = np.flatnonzero(np.isfinite(arr))
        at = t + arr[got]
        self.last_arrival[got] = np.maximum(self.last_arrival[got], at)
        bins = np.minimum((at / HEARTBEAT_S).astype(np.int64), self.recv_bins.shape[1] - 1)
        self.recv_bins[got, bins] += 1  # each peer once per message: no repeated index
        if counting:
            st = self.stats
            st["messages"] += 1
            st["subscribers"] += int(self.online.sum()) - 1
            st["reached"] += len(got) - 1
            self.delays += np.bincount(np.minimum(arr[got] / DELAY_BIN_S, DELAY_BINS).astype(np.int64),
                                       minlength=DELAY_BINS + 1)
            self.delays[0] -= 1  # the publisher's own
            sent = np.isfinite(arr[ms]) & (md != pred[ms]) & (md != p) & (ms != p)
            fd = np.array(sorted(self.conn[p]), np.int64)
            self.up += np.bincount(ms[sent], minlength=n) * self.msg_bytes
            self.up[p] += len(fd) * self.msg_bytes
            copies_in = np.bincount(md[sent], minlength=n)
            copies_in[fd] += 1
            self.down += copies_in * self.msg_bytes
            self.rpcs_in += copies_in
            st["copies"] += int(copies_in.sum())
        return arr

    def _pull(self, p: int, t: float, arr, pred, g, counting: bool) -> None:
        """IHAVE → IWANT → the message, for peers the mesh reaches later than that (or never); then their mesh."""
        gs, gd = self.g_src, self.g_dst
        if not len(gs):
            return
        have = arr[gs]
        ok = np.isfinite(have) & self.online[gd] & (gd != p)
        if not ok.any():
            return
        gs, gd, have = gs[ok], gd[ok], have[ok]
        ph = self.phase[gs]
        beat = ph + np.ceil((t + have - ph) / HEARTBEAT_S) * HEARTBEAT_S - t  # the holder's next heartbeat
        one_way = (self.rtt[gs] + self.rtt[gd]) / 4 + HOP_S
        told = beat + one_way
        want = told < arr[gd]
        if not want.any():
            return
        gs, gd = gs[want], gd[want]
        got = told[want] + one_way[want] + self.hop(gs, gd)
        if counting:
            self.stats["iwant"] += len(gd)
            self.up += np.bincount(gd, minlength=self.n) * (MSG_ID_BYTES + CONTROL_FRAMING)
            self.down += np.bincount(gs, minlength=self.n) * (MSG_ID_BYTES + CONTROL_FRAMING)
            self.up += np.bincount(gs, minlength=self.n) * self.msg_bytes
            self.down += np.bincount(gd, minlength=self.n) * self.msg_bytes
            self.rpcs_in += np.bincount(gd, minlength=self.n) + np.bincount(gs, minlength=self.n)
        before = arr.copy()
        np.minimum.at(arr, gd, got)
        frontier = np.flatnonzero(arr < before)
        pred[frontier] = -1
        if counting:
            self.stats["by_iwant"] += len(frontier)
        indptr, indices, data = g.indptr, g.indices, g.data
        while len(frontier):
            lo, hi = indptr[frontier], indptr[frontier + 1]
            cnt = hi - lo
            u = np.repeat(frontier, cnt)
            idx = np.repeat(lo - np.cumsum(cnt) + cnt, cnt) + np.arange(cnt.sum())
            v, cand = indices[idx], arr[u] + data[idx]
            better = (cand < arr[v]) & (v != p)
            if not better.any():
                break
            v, u, cand = v[better], u[better], cand[better]
            np.minimum.at(arr, v, cand)
            pred[v] = u
            frontier = np.unique(v)

    # ------------------------------------------------------------------ the row's numbers
    def row(self, honest: np.ndarray, online_s: np.ndarray, measure_s: float) -> dict:
        st = self.stats
        full = honest & (online_s >= measure_s)  # honest peers online through the whole measured part
        up_rate = self.up / np.maximum(online_s, 1e-9)
        cum = np.cumsum(self.delays)

        def pct(q: float) -> float | None:
            return float(np.searchsorted(cum, q * cum[-1]) + 1) * DELAY_BIN_S if cum[-1] else None
        return {"p50_gossip_arrival_s": pct(0.5), "p95_gossip_arrival_s": pct(0.95), "p99_gossip_arrival_s": pct(0.99),
                "gossip_reach": st["reached"] / st["subscribers"] if st["subscribers"] else None,
                "gossip_copies_per_delivery": st["copies"] / st["reached"] if st["reached"] else None,
                "gossip_by_iwant_share": st["by_iwant"] / st["reached"] if st["reached"] else None,
                "gossip_messages": st["messages"], "gossip_iwant": st["iwant"],
                "gossip_ihave_ids_per_ihave": st["ihave_ids"] / st["ihaves"] if st["ihaves"] else None,
                "gossip_grafts": st["grafts"], "gossip_prunes": st["prunes"],
                "gossip_rpcs_in_per_s_max": float((self.rpcs_in[full] / measure_s).max()) if full.any() else None,
                "gossip_upload_saturated_share": float((up_rate[full] > self.up_bps[full]).mean())
                if full.any() else None,
                "mesh_degree_mean": float(np.mean([len(self.mesh[i]) for i in np.flatnonzero(self.online)]))
                if self.online.any() else None}
