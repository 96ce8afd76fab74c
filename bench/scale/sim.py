"""The discrete-event loop: the project's own exchange code, driven over the modelled world of bench.scale.model.

REAL (imported and called, not re-implemented):
    protocols.keys        window_of, shard_of, rollouts_key: which key an announcement goes under
    protocols.codec       encode_announcement (every announcement's bytes); encode_bundle once for the size
    swarm.config          SwarmConfig(...), through swarm.exchange.receive.Limits.of: the receive limits and fan-in budget
    swarm.exchange.polling         PollPlan.keys / PollPlan.saw: which keys each poll tick reads, crowded keys less often
    swarm.dht.expiry          Expirations.next: the expiration of every DHT store
    swarm.exchange.inbox           Inbox.offer (vetting: swarm.exchange.receive.vet_announcement, dedupe, backoff, candidate
                          caps), Inbox.choose (bounded fan-in, standing order, newcomer reserve), Inbox.claim
                          (a pushed bundle's offer), Inbox.settle / settle_fetched (delivery, failures → backoff),
                          Inbox.take, Inbox.judge (swarm.exchange.standing), Inbox.known_peers (whom a publish notifies)
    swarm.exchange.push            Pusher.targets: whom a client-mode peer offers its bundle to
    constants, with `Setting.admission`: swarm.exchange.admission PULLS_PER_PEER / TOTAL_STREAMS,
                          swarm.exchange.fetch BUSY_TRIES, swarm.net.wire BUSY_RETRY_S — one pull of a publisher at a
                          time; a publisher whose strangers' half of its bundle streams (16) is held by pulls (ours
                          × N / observers) answers busy, asked again after 1–2 × retry_after with the slot kept, at
                          most 4 tries, then dropped as `busy` (Inbox.settle_fetched: no backoff)
MODELLED (bench.scale.model): time (a simulated clock; each peer's clock is sim time + its skew), the
network (latencies, bandwidth, who is online or reachable), the DHT's storage and lookups, the bundle's
bytes (never encoded per publish: a fetched bundle is settled with its announced record count, skipping
the decode of swarm.exchange.receive.open_bundle, which other benches measure), the node's ingest verdict (an
honest peer's groups are used, a junk peer's all dropped), and the loop that swarm.exchange.hivemind
runs on asyncio (poll, wait poll_interval_s or a push's wake, choose, fetch in ≤ 8 slots of which
strangers hold ≤ 4).

Receive sides run in full for `observers` peers chosen at random (all peers when N ≤ observers). The
others publish, poll (PollPlan, so their DHT load is real) and push to the peers they saw most recently
(a recency list instead of Inbox.known_peers); bundle uploads caused by observers count N / observers
times, so uploads per peer stay the swarm's.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter, OrderedDict, deque

from bench.scale.legacy import StridePollPlan
from bench.scale.model import (
    CONNECT_RTTS,
    DIAL_FAIL_S,
    RPC_CAP,
    Costs,
    DHTModel,
    Setting,
    dht_hops,
    make_world,
)
from bench.scale.report import Tally
from protocols.announce import encode_announcement
from protocols.keys import rollouts_key, shard_of, window_of
from protocols.records import Announcement
from swarm.config import SwarmConfig
from swarm.dht.expiry import Expirations
from swarm.exchange.inbox import Inbox
from swarm.exchange.polling import PollPlan
from swarm.exchange.push import Pusher
from swarm.exchange.admission import PULLS_PER_PEER, TOTAL_STREAMS
from swarm.exchange.fetch import BUSY_TRIES
from swarm.exchange.receive import Limits
from swarm.net.wire import BUSY_RETRY_S

SLOTS, STRANGER_SLOTS = 8, 4  # swarm.config max_concurrent_fetches default, and half of it for strangers
STRANGER_STREAMS = TOTAL_STREAMS // 2  # bundle streams a publisher admits at once from peers not in its good standing
T0 = 1.78e9  # unix time at sim time 0


class Node:
    """One peer's exchange state: the real books (Inbox, PollPlan, Expirations, Pusher) plus its loop's state."""

    def __init__(self, sim: Simulation, w, observer: bool):
        self.w, self.sim, self.observer = w, sim, observer
        self.gen, self.epoch = 0, 0  # gen: cancels a scheduled poll; epoch: a session (events of earlier ones are void)
        self.restart(0.0)

    def restart(self, t: float) -> None:
        s = self.sim
        self.inbox = Inbox(s.limits, rng=random.Random(s.rng.random()), clock=lambda: T0 + s.now + self.w.skew_s) \
            if self.observer else None
        self.plan = (StridePollPlan if s.setting.plan == "legacy" else PollPlan)(s.cfg, self.clock(t),
                                                                                  rng=random.Random(s.rng.random()))
        self.exp = Expirations()
        self.pusher = Pusher(push_peers=s.setting.notify, timeout_s=s.cfg.fetch_timeout_s) if self.w.nat else None
        self.known: OrderedDict[str, None] = OrderedDict()  # non-observers: peers seen, most recent last
        self.tick, self.reading = 0, False
        self.epoch += 1
        self.busy, self.busy_strangers, self.queue = 0, 0, deque()
        self.pulling: Counter = Counter()  # peer id → our pulls of it in flight (swarm.exchange.admission)
        self.conns: OrderedDict[int, None] = OrderedDict()

    def clock(self, t: float) -> float:
        return T0 + t + self.w.skew_s

    def known_peers(self) -> list[str]:
        if self.inbox is not None:
            return self.inbox.known_peers()
        return list(reversed(self.known))

    def saw(self, peer: str) -> None:
        self.known[peer] = None
        self.known.move_to_end(peer)
        if len(self.known) > 256:
            self.known.popitem(last=False)


class Simulation:
    def __init__(self, setting: Setting, costs: Costs):
        self.setting, self.costs = setting, costs
        self.rng = random.Random(setting.seed)
        self.cfg = SwarmConfig(swarm_id="sim", shards=setting.shards, read_shards=setting.read_shards,
                               max_fetches_per_window=setting.budget, notify_peers=setting.notify,
                               push_peers=max(1, setting.notify), poll_interval_s=setting.poll_s,
                               max_entries_per_key=setting.max_entries_per_key)
        self.limits = Limits.of(self.cfg)
        self.world = make_world(setting, self.rng)
        self.dht = DHTModel(self.world, costs.entry_bytes)
        self.by_id = {p.peer_id: p.idx for p in self.world}
        self.sybil_owner = {sid: p.idx for p in self.world for sid in p.sybil_ids}
        obs = set(range(setting.peers)) if setting.peers <= setting.observers else \
            set(self.rng.sample(range(setting.peers), setting.observers))
        self.nodes = [Node(self, w, i in obs) for i, w in enumerate(self.world)]
        self.scale = setting.peers / len(obs)
        self.hops = dht_hops(sum(not p.nat for p in self.world))
        self.mean_rtt = sum(p.rtt_s for p in self.world) / len(self.world)
        self.bundles: dict[str, tuple[int, float, int]] = {}  # sha256 → (publisher, sim time published, round)
        self.rounds = [0] * setting.peers
        self.tally = Tally(setting, self.world, obs)
        self.now, self._seq, self._heap = 0.0, 0, []

    # ------------------------------------------------------------------ the loop
    def at(self, t: float, fn, *args) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, fn, args))

    def run(self) -> Tally:
        s = self.setting
        end = s.warmup_s + s.measure_s
        for node in self.nodes:
            w = node.w
            for a, b in w.sessions:
                if a < end:
                    self.at(a, self.join, node)
                    if b < end:
                        self.at(b, self.leave, node)
        while self._heap:
            t, _, fn, args = heapq.heappop(self._heap)
            if t > end:
                break
            self.now = t
            self.tally.measuring = t >= s.warmup_s
            fn(*args)
        self.tally.finish(self)
        return self.tally

    def online(self, i: int) -> bool:
        return self.world[i].online(self.now)

    def rtt(self, a: int, b: int) -> float:
        return (self.world[a].rtt_s + self.world[b].rtt_s) / 2

    def connect_cost(self, a: Node, b: int) -> float:
        """Round trips before a request on a stream from `a` to peer `b` (libp2p keeps connections open)."""
        fresh = b not in a.conns
        a.conns[b] = None
        a.conns.move_to_end(b)
        if len(a.conns) > 128:
            a.conns.popitem(last=False)
        return (CONNECT_RTTS if fresh else 0) + 0.5

    # ------------------------------------------------------------------ sessions
    def join(self, node: Node) -> None:
        node.restart(self.now)
        self.tally.joins += self.tally.measuring
        w = node.w
        if w.hostile == "ghost":
            self.at(self.now + self.rng.uniform(0, self.setting.round_s), self.ghost, node, node.epoch)
        else:
            first = self.now + (w.offset_s - self.now) % self.setting.round_s
            self.at(first, self.round, node, node.epoch)
        # a swarm that is already running: at t = 0 the first polls wait one round, so that the DHT holds a
        # round of announcements (not the empty DHT of a swarm whose every peer starts at the same instant)
        first_poll = self.setting.round_s if self.now == 0.0 else 0.0
        self.at(self.now + first_poll + self.rng.uniform(0, self.setting.poll_s), self.poll, node, node.gen)

    def leave(self, node: Node) -> None:
        node.gen += 1
        self.tally.leaves += self.tally.measuring

    # ------------------------------------------------------------------ a node's round: take, judge, publish
    def round(self, node: Node, epoch: int) -> None:
        i = node.w.idx
        if epoch != node.epoch or not self.online(i):
            return
        s, c = self.setting, self.costs
        self.at(self.now + s.round_s, self.round, node, epoch)
        if node.inbox is not None:
            got = node.inbox.take(0, 0.0)
            outcomes: Counter = Counter()
            for p in got.peers:
                j = self.by_id.get(p)
                junk = j is not None and self.world[j].hostile == "junk"
                outcomes[p] = (0, 1) if junk else (1, 0)
            node.inbox.judge(dict(outcomes))
            self.tally.took(i, got, self)
        self.rounds[i] += 1
        now = node.clock(self.now)
        sha = f"{self.rng.getrandbits(256):064x}"
        ann = Announcement(peer=node.w.peer_id, window=window_of(now, self.cfg.window_s),
                           count=s.groups, nbytes=c.bundle_bytes, sha256=sha, policy_version=self.rounds[i],
                           created_at=now, addrs="" if node.w.nat else "/ip4/203.0.113.7/tcp/31337")
        value = encode_announcement(ann)
        self.bundles[sha] = (i, self.now, self.rounds[i])
        self.tally.published(i, node.w.nat)
        if node.pusher is not None:  # client mode: offer the bundle itself, never store it
            for peer in node.pusher.targets(node.known_peers(), now):
                self.send(node, peer, value, ann, offer=True)
            return
        key = rollouts_key(self.cfg.swarm_id, ann.window, shard_of(node.w.peer_id, self.cfg.shards))
        self.store(node, key, node.w.peer_id, value, node.exp.next(key, now + self.cfg.max_age_s))
        for peer in node.known_peers()[: s.notify]:
            self.send(node, peer, value, ann, offer=False)

    def ghost(self, node: Node, epoch: int) -> None:
        """A ghost peer: every window, each of its identities announces a bundle it never serves, in the DHT
        and pushed to `flood_peers` random peers."""
        if epoch != node.epoch or not self.online(node.w.idx):
            return
        s = self.setting
        self.at(self.now + self.cfg.window_s, self.ghost, node, epoch)
        now = node.clock(self.now)
        for sid in node.w.sybil_ids:
            ann = Announcement(peer=sid, window=window_of(now, self.cfg.window_s), count=s.groups,
                               nbytes=self.costs.bundle_bytes, sha256=f"{self.rng.getrandbits(256):064x}",
                               policy_version=0, created_at=now, addrs="/ip4/198.51.100.9/tcp/9")
            value = encode_announcement(ann)
            key = rollouts_key(self.cfg.swarm_id, ann.window, shard_of(sid, self.cfg.shards))
            self.store(node, key, sid, value, now + self.cfg.max_age_s)
            for j in self.rng.sample(range(s.peers), min(s.flood_peers, s.peers)):
                if j != node.w.idx:
                    self.send(node, self.world[j].peer_id, value, ann, offer=False, signer=sid)

    # ------------------------------------------------------------------ DHT store and read
    def store(self, node: Node, key: str, signer: str, value: bytes, expiration: float) -> None:
        holders = [h for h in self.dht.holders_of(key, self.now) if self.online(h)]
        self.tally.dht_store(node.w.idx, holders, self.costs.entry_bytes)
        delay = self.hops * self.mean_rtt + self.costs.overhead_s * self.hops
        self.at(self.now + delay, self.dht.store, key, signer, value, expiration)

    def poll(self, node: Node, gen: int) -> None:
        i = node.w.idx
        if gen != node.gen or node.reading or not self.online(i):
            return
        if not self.poll_due(node):  # gossip delivers: this interval reads nothing (bench.scale.gossipsim) …
            self.choose(node)  # … but runs the fan-in choice, as swarm.exchange.poller does
            node.gen += 1
            self.at(self.now + self.setting.poll_s, self.poll, node, node.gen)
            return
        node.reading = True
        now = node.clock(self.now)
        keys = node.plan.keys(node.tick, now)
        node.tick += 1
        found, down = {}, 0
        per = self.cfg.max_entries_per_key if node.inbox is not None else 2  # others: a few, for whom to push to
        for key, ws in keys.items():
            entries, signers = self.dht.entries(key, T0 + self.now)
            holders = [h for h in self.dht.holders_of(key, self.now) if self.online(h)]  # an empty key is asked too
            size = self.dht.value_bytes(len(entries))
            self.tally.dht_read(i, holders, size, catch_up=ws[0] < window_of(now, self.cfg.window_s) - 1)
            down += size * len(holders)
            if size > RPC_CAP:
                continue  # hivemind refuses the message: the read fails
            picked = self.rng.sample(signers, per) if len(signers) > per else signers
            found[key] = (ws, len(entries), [(sig, entries[sig]) for sig in picked])
        delay = (self.hops * (node.w.rtt_s + self.mean_rtt) / 2 + self.costs.overhead_s * self.hops
                 + down / node.w.down_bps)
        self.at(self.now + delay, self.poll_done, node, gen, found)

    def poll_due(self, node: Node) -> bool:
        return True  # DHT only: every poll interval reads

    def poll_done(self, node: Node, gen: int, found: dict) -> None:
        node.reading = False
        if gen != node.gen:
            return
        now = node.clock(self.now)
        for key, ((window, shard), total, picked) in found.items():
            node.plan.saw(key, total)
            for signer, (value, _exp) in picked:
                if signer == node.w.peer_id:
                    continue
                if node.inbox is not None:
                    node.inbox.offer(value, signer, now=now, key_window=window, key_shard=shard)
                else:
                    node.saw(signer)
        self.choose(node)
        node.gen += 1  # wait poll_interval_s, or less if a push wakes us
        self.at(self.now + self.setting.poll_s, self.poll, node, node.gen)

    # ------------------------------------------------------------------ pushes (notify, client-mode offers)
    def send(self, node: Node, peer: str, value: bytes, ann: Announcement, *, offer: bool, signer: str = "") -> None:
        j = self.by_id.get(peer)
        self.tally.push_sent(node.w.idx, len(value) + self.costs.frame_bytes)
        if j is None or self.world[j].nat or not self.online(j):
            if node.pusher is not None:
                node.pusher._unreachable[peer] = node.clock(self.now)  # what Pusher._offer does on a failed dial
            return
        delay = self.connect_cost(node, j) * self.rtt(node.w.idx, j) + self.costs.overhead_s
        self.at(self.now + delay, self.pushed, self.nodes[j], node.w.idx, signer or node.w.peer_id, value, ann, offer)

    def pushed(self, node: Node, src: int, signer: str, value: bytes, ann: Announcement, offer: bool) -> None:
        i = node.w.idx
        if not self.online(i):
            return
        self.tally.push_received(i, len(value) + self.costs.frame_bytes)
        now = node.clock(self.now)
        if node.inbox is None:
            node.saw(signer)
            if not node.reading:
                node.gen += 1
                self.poll(node, node.gen)  # the push wakes the poller
            return
        if offer:
            taken = node.inbox.claim(value, signer, now=now)
            if taken is not None:
                self.tally.selected(i, taken, self)
                self.transfer(node, src, taken, pushed=True)
            return
        if node.inbox.offer(value, signer, now=now):
            self.choose(node)  # a push runs the fan-in choice, not a DHT read (swarm.exchange.handlers)

    # ------------------------------------------------------------------ fan-in and fetches
    def choose(self, node: Node) -> None:
        if node.inbox is None:
            return
        for ann in node.inbox.choose(node.clock(self.now)):
            self.tally.selected(node.w.idx, ann, self)
            node.queue.append((ann, not node.inbox.is_good(ann.peer)))
        self.start_fetches(node)

    def start_fetches(self, node: Node) -> None:
        waiting = len(node.queue)
        admission = self.setting.admission
        while node.queue and node.busy < SLOTS and waiting:
            ann, stranger = node.queue.popleft()
            waiting -= 1
            if stranger and node.busy_strangers >= STRANGER_SLOTS or \
                    admission and node.pulling[ann.peer] >= PULLS_PER_PEER:  # one pull of a peer at a time
                node.queue.append((ann, stranger))
                continue
            node.busy += 1
            node.busy_strangers += stranger
            node.pulling[ann.peer] += 1
            self.fetch(node, ann, stranger)

    def fetch(self, node: Node, ann: Announcement, stranger: bool, tries: int = 0, epoch: int | None = None) -> None:
        if epoch is not None and epoch != node.epoch:
            return
        i = node.w.idx
        j = self.by_id.get(ann.peer)
        if self.setting.admission and j is not None and not self.world[j].nat and self.online(j) \
                and getattr(self.world[j], "inflight", 0) * self.scale >= STRANGER_STREAMS:
            # the publisher's admission is full (its strangers' half: our observers' pulls × N / observers): busy.
            # Asked again after 1–2 × its retry_after, the slot kept, at most BUSY_TRIES times (swarm.exchange.hivemind)
            self.tally.c["busy_answers"] += self.tally.measuring
            if tries + 1 < BUSY_TRIES:
                wait = BUSY_RETRY_S * self.rng.uniform(1.0, 2.0) + self.rtt(i, j)
                self.at(self.now + wait, self.fetch, node, ann, stranger, tries + 1, node.epoch)
            else:
                self.at(self.now + self.rtt(i, j), self.fetched, node, node.epoch, ann, stranger, "busy")
            return
        if j is None:  # a throwaway identity: nobody serves it
            j = self.sybil_owner[ann.peer]
            tarpit = ann.sha256[0] in "01234567"
            done, reason = (self.cfg.fetch_timeout_s, "fetch_timeout") if tarpit else (self.rtt(i, j), "fetch_failed")
            self.at(self.now + done, self.fetched, node, node.epoch, ann, stranger, reason)
            return
        if self.world[j].nat or not self.online(j):
            self.at(self.now + DIAL_FAIL_S, self.fetched, node, node.epoch, ann, stranger, "fetch_failed")
            return
        self.transfer(node, j, ann, pushed=False, stranger=stranger)

    def transfer(self, node: Node, j: int, ann: Announcement, *, pushed: bool, stranger: bool = False) -> None:
        """The bundle's bytes from peer j to node: handshakes, j's upload queue, node's download."""
        i, c = node.w.idx, self.costs
        pub = self.world[j]
        rtts = 0.5 if pushed else self.connect_cost(node, j) + 0.5
        start = self.now + rtts * self.rtt(i, j) + c.overhead_s
        busy = getattr(pub, "up_free", 0.0)
        begin = max(start, busy)
        if not pushed:
            pub.inflight = getattr(pub, "inflight", 0) + 1  # a stream its admission holds until the transfer ends
        pub.up_free = begin + self.scale * ann.nbytes / pub.up_bps  # the swarm's fetches of j, not only ours
        end = begin + ann.nbytes / min(pub.up_bps, node.w.down_bps) + 0.5 * self.rtt(i, j)
        self.tally.bundle_bytes(j, i, ann.nbytes + c.frame_bytes)
        if pushed:
            self.at(end, self.settled, node, node.epoch, ann)
        else:
            self.at(end, self.released, j)
            self.at(end, self.fetched, node, node.epoch, ann, stranger, "")

    def released(self, j: int) -> None:
        self.world[j].inflight -= 1

    def fetched(self, node: Node, epoch: int, ann: Announcement, stranger: bool, reason: str) -> None:
        if epoch != node.epoch:
            return
        node.busy -= 1
        node.busy_strangers -= stranger
        node.pulling[ann.peer] -= 1
        if self.online(node.w.idx) and node.inbox is not None:
            if reason:
                node.inbox.settle_fetched(ann, None, self.cfg.swarm_id, reason)
                self.tally.failed(node.w.idx, ann, self)
            else:
                self.settled(node, epoch, ann)
        self.start_fetches(node)

    def settled(self, node: Node, epoch: int, ann: Announcement) -> None:
        if epoch != node.epoch or not self.online(node.w.idx):
            return
        node.inbox.settle(ann, [ann] * ann.count, Counter(), nbytes=0)  # stand-ins for records: no decoded size
        self.tally.delivered(node.w.idx, ann, self)


def simulate(setting: Setting, costs: Costs) -> dict:
    sim = Simulation(setting, costs)
    return sim.run().row(sim)


