"""The modelled world of the scale simulation: settings, peers, the DHT, and costs measured from the real code.

Nothing here decides anything the exchange decides (swarm.* does that, driven by bench.scale.sim); this
module only says what the network does:

    peers     access round trip 20–300 ms (log-uniform), upload 5–1,000 Mbit/s (log-uniform), download
              4× upload (at most 1 Gbit/s); path RTT between two peers = the mean of their access RTTs;
              `nat` of them in client mode (push only, cannot be dialled); clock offset uniform in
              ±`skew_s`; `hostile` of them hostile: half "ghost" (announce `sybils` throwaway identities
              a window each in the DHT and push them to `flood_peers` random peers; the bytes are never
              served: half refuse the connection, half hold it until the fetch timeout), half "junk"
              (announce and serve real-size bundles whose every record a receiver's ingest drops)
    sessions  with churn, online/offline periods with session lengths log-uniform in [2 min, 3 days]
              and downtimes log-uniform in [1 min, 1 h], starting in the stationary state (a peer's
              session at t = 0 is length-biased, its remaining part uniform); a peer leaves without
              notice (its DHT entries stay until they expire) and comes back as a restarted node
    streams   a first contact costs `CONNECT_RTTS` round trips (TCP, security, muxer), a stream on an
              open connection one; a bundle then moves at the publisher's upload (a FIFO queue per
              publisher); every RPC adds the processing delay `overhead_s` (fitted to §7's real peers)
    DHT       hivemind's Kademlia as configured by the project: a key's value lives on the
              `REPLICAS` (hivemind num_replicas = 5) reachable online peers XOR-nearest to its DHTID
              (hivemind's own DHTID.generate); a read with sufficient_expiration_time = inf (what
              swarm.dht.peer.read_keys asks) visits the whole beam, so every replica answers with the whole
              value: all entries under the key, each one signed entry of `entry_bytes`; a lookup takes
              ⌈log2(DHT peers) / 4⌉ hops at the mean path RTT; values over hivemind's 4 MiB RPC cap fail
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

CONNECT_RTTS = 3  # TCP + security + muxer handshakes before the first stream to a peer
REPLICAS = 5  # hivemind DHTNode num_replicas (default)
RPC_CAP = 4 << 20  # hivemind's largest RPC message
DIAL_FAIL_S = 5.0  # a dial to a peer that left (no answer) gives up after this long
SESSION_S = (120.0, 3 * 86400.0)  # session lengths: minutes to days
DOWNTIME_S = (60.0, 3600.0)


@dataclass(frozen=True)
class Setting:
    """One simulated swarm: its size, its network and the exchange's configuration (swarm.config)."""

    name: str
    peers: int
    shards: int = 4  # swarm-wide key count per window (the shipped default)
    read_shards: int | None = None  # shards a poll reads (None: all)
    rtt_ms: tuple[float, float] = (20.0, 300.0)
    up_mbit: tuple[float, float] = (5.0, 1000.0)
    nat: float = 0.30
    hostile: float = 0.05
    churn: bool = True
    skew_s: float = 3.0
    sybils: int = 8  # throwaway identities per ghost peer
    flood_peers: int = 64  # peers a ghost pushes each of its announcements to
    round_s: float = 10.0  # an honest peer publishes one bundle per round
    groups: int = 8  # groups (records) per bundle
    budget: int = 16  # max_fetches_per_window
    notify: int = 8  # notify_peers / push_peers
    poll_s: float = 0.5
    max_entries_per_key: int = 32
    warmup_s: float = 60.0
    measure_s: float = 60.0
    observers: int = 1000  # peers whose receive side runs in full (all of them when peers ≤ observers)
    transport: str = "dht"  # "dht": announcements by DHT and pushes; "gossip": also gossipsub (bench.scale.gossipsim)
    plan: str = "current"  # "current": swarm.exchange.polling.PollPlan; "legacy": its rule before reads were paced (bench.scale.legacy)
    sharded: bool = False  # gossip on announcement shards (bench.scale.shardmesh) instead of one topic
    per_shard: int = 32  # swarm.gossip_shard_peers
    extra_shards: int = 1  # swarm.gossip_extra_shards
    admission: bool = False  # publishers admit 16 strangers' bundle streams at once, the rest answered busy (sim.py)
    design: str = ""  # what the row's design is, in words (carried into the row)
    seed: int = 0
    extra: dict = field(default_factory=dict, compare=False)  # free-form notes carried into the row


def log_uniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


@dataclass
class WorldPeer:
    """What the network says about one peer (never what the exchange decides)."""

    idx: int
    peer_id: str
    node_id: int  # 160-bit DHT node id
    rtt_s: float
    up_bps: float  # bytes per second
    down_bps: float
    nat: bool
    hostile: str  # "", "ghost" or "junk"
    skew_s: float
    offset_s: float  # when in its round it publishes
    sessions: list[tuple[float, float]]  # online intervals [start, end)
    sybil_ids: list[str] = field(default_factory=list)

    def online(self, t: float) -> bool:
        return any(a <= t < b for a, b in self.sessions)


def _sessions(rng: random.Random, horizon: float, churn: bool) -> list[tuple[float, float]]:
    if not churn:
        return [(0.0, math.inf)]
    lo, hi = SESSION_S
    mean_s = (hi - lo) / math.log(hi / lo)
    mean_d = (DOWNTIME_S[1] - DOWNTIME_S[0]) / math.log(DOWNTIME_S[1] / DOWNTIME_S[0])
    out, t = [], 0.0
    if rng.random() < mean_s / (mean_s + mean_d):  # online at t = 0: a length-biased session, part of it left
        t = rng.uniform(lo, hi) * rng.random()
        out.append((0.0, t))
    else:
        t = log_uniform(rng, *DOWNTIME_S) * rng.random()
    while t < horizon:
        start = t + (log_uniform(rng, *DOWNTIME_S) if out else 0.0)
        end = start + log_uniform(rng, lo, hi)
        out.append((start, end))
        t = end
    return out


def make_world(s: Setting, rng: random.Random) -> list[WorldPeer]:
    horizon = s.warmup_s + s.measure_s
    n_hostile = round(s.hostile * s.peers)
    hostile = set(rng.sample(range(s.peers), n_hostile))
    honest = [i for i in range(s.peers) if i not in hostile]
    nat = set(rng.sample(honest, round(s.nat * s.peers))) if honest else set()
    peers = []
    for i in range(s.peers):
        up = log_uniform(rng, *s.up_mbit) * 1e6 / 8
        kind = ("ghost" if len([h for h in hostile if h < i]) % 2 == 0 else "junk") if i in hostile else ""
        p = WorldPeer(idx=i, peer_id=f"P{i:05d}{rng.getrandbits(64):016x}", node_id=rng.getrandbits(160),
                      rtt_s=log_uniform(rng, *s.rtt_ms) / 1e3, up_bps=up, down_bps=min(4 * up, 1e9 / 8),
                      nat=i in nat, hostile=kind, skew_s=rng.uniform(-s.skew_s, s.skew_s),
                      offset_s=rng.uniform(0, s.round_s),
                      sessions=_sessions(rng, horizon, s.churn and not kind))
        if kind == "ghost":
            p.sybil_ids = [f"S{i:05d}x{j:03d}{rng.getrandbits(48):012x}" for j in range(s.sybils)]
        peers.append(p)
    return peers


def dht_hops(n_dht: int) -> int:
    """Sequential round trips of one Kademlia lookup (beam search, 4 parallel workers, buckets of 20)."""
    return max(1, math.ceil(math.log2(max(2, n_dht)) / 4))


class DHTModel:
    """Stored values per key with hivemind's storage rule, and which peers hold each key."""

    def __init__(self, peers: list[WorldPeer], entry_bytes: int):
        from hivemind.dht.routing import DHTID  # the DHT's own key → id mapping

        self._dhtid = DHTID
        self.peers = peers
        self.entry_bytes = entry_bytes
        self.values: dict[str, dict[str, tuple[bytes, float]]] = {}
        self.signers: dict[str, list[str]] = {}
        self.first_expiry: dict[str, float] = {}
        self.holders: dict[str, list[int]] = {}
        self._dht_nodes = [p for p in peers if not p.nat]  # client-mode peers hold nothing

    def holders_of(self, key: str, t: float) -> list[int]:
        """The REPLICAS reachable peers online at the key's first store that are XOR-nearest to its DHTID."""
        found = self.holders.get(key)
        if found is None:
            kid = int(self._dhtid.generate(source=key))
            online = [p for p in self._dht_nodes if p.online(t)]
            found = self.holders[key] = [p.idx for p in sorted(online, key=lambda p: p.node_id ^ kid)[:REPLICAS]]
        return found

    def store(self, key: str, signer: str, value: bytes, expiration: float) -> bool:
        """hivemind's rule: one value per (key, subkey), replaced only by one that expires strictly later."""
        slot = self.values.setdefault(key, {})
        held = slot.get(signer)
        if held is not None and expiration <= held[1]:
            return False
        if held is None:
            self.signers.setdefault(key, []).append(signer)
        slot[signer] = (value, expiration)
        self.first_expiry[key] = min(self.first_expiry.get(key, math.inf), expiration)
        return True

    def entries(self, key: str, t: float) -> tuple[dict[str, tuple[bytes, float]], list[str]]:
        """The live entries under `key` at (unix) time t, and their signers as a list (for sampling)."""
        slot = self.values.get(key)
        if not slot:
            return {}, []
        if t >= self.first_expiry[key]:
            live = {s: ve for s, ve in slot.items() if ve[1] > t}
            self.values[key], self.signers[key] = live, list(live)
            self.first_expiry[key] = min((ve[1] for ve in live.values()), default=math.inf)
            slot = live
        return slot, self.signers[key]

    def value_bytes(self, n_entries: int) -> int:
        return n_entries * self.entry_bytes


@dataclass
class Costs:
    """Sizes measured by running the project's own encoders once (bench.scale.calibrate.measure_costs)."""

    bundle_bytes: int  # one bundle of `groups` lab-round groups (protocols.codec.encode_bundle)
    announcement_bytes: int  # one announcement value (protocols.codec.encode_announcement)
    entry_bytes: int  # one signed DHT entry: value + RSA signature + owner subkey + expiration
    overhead_s: float = 0.0  # processing delay per RPC (fitted to the real 4-peer run, §7)
    frame_bytes: int = 200  # stream setup + framing of one notify / request / header exchange
