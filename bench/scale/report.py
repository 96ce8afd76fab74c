"""Accounting of the scale simulation: what each peer sends and receives, what each DHT key holder serves,
what fan-in selects and what arrives; one result row per setting, and the figure.

Only the measured part of a run counts (after `warmup_s`). Per peer per round = totals over honest peers
divided by their peer-rounds (seconds online while measuring / round_s): announcement traffic (DHT
stores, DHT read answers, notify pushes) over every honest peer; bundle downloads, delivery and staleness
over the honest observers (the peers whose receive side runs in full), bundle uploads as the observers
caused them × N / observers. A key holder's requests are the key lookups (reads and stores) the DHT
routes to it as one of the key's replicas. In the gossip setting the bytes of every gossipsub copy and
control message an honest peer sends or receives (bench.scale.mesh) are added to its up and down bytes.
"""

from __future__ import annotations

from collections import Counter

from bench.harness.output import pyplot, save_figure


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


class Tally:
    def __init__(self, setting, world, observers: set[int]):
        self.s, self.world = setting, world
        self.honest = [not p.hostile for p in world]
        self.observers = observers
        self.measuring = False
        self.c: Counter = Counter()  # swarm-wide counters
        self.holder_req: Counter = Counter()  # peer → key lookups served as a replica
        self.holder_bytes: Counter = Counter()  # peer → bytes of DHT answers it sent
        self.up_bundles: Counter = Counter()  # peer → bundle bytes it uploaded (observers' fetches)
        self.pending: dict[tuple[int, str], float] = {}  # (observer, sha256) selected while measuring → when
        self.visible: list[float] = []
        self.visible_push: list[float] = []
        self.waited: list[float] = []  # publish → chosen by the fan-in (or taken from a push)
        self.fetch_s: list[float] = []  # chosen → delivered
        self.ages: list[float] = []
        self.lags: list[int] = []
        self.drops: Counter = Counter()
        self.joins = self.leaves = 0
        self.dht_read_sizes: list[int] = []

    def _obs(self, i: int) -> bool:
        return self.measuring and i in self.observers and self.honest[i]

    # -- publishing and the DHT ----------------------------------------------------------------
    def published(self, i: int, nat: bool) -> None:
        if self.measuring:
            self.c["published_nat" if nat else "published"] += 1

    def dht_store(self, i: int, holders: list[int], entry_bytes: int) -> None:
        if not self.measuring:
            return
        if self.honest[i]:
            self.c["stores"] += 1
            self.c["up_ann"] += entry_bytes * len(holders)
        for h in holders:
            self.holder_req[h] += 1

    def dht_read(self, i: int, holders: list[int], size: int, catch_up: bool = False) -> None:
        if not self.measuring:
            return
        if self.honest[i]:
            self.c["reads"] += 1
            self.c["down_ann"] += size * len(holders)
            self.c["down_catch_up"] += size * len(holders) if catch_up else 0
            if len(self.dht_read_sizes) < 200_000:
                self.dht_read_sizes.append(size)
        for h in holders:
            self.holder_req[h] += 1
            self.holder_bytes[h] += size

    def push_sent(self, i: int, nbytes: int) -> None:
        if self.measuring and self.honest[i]:
            self.c["up_ann"] += nbytes
            self.c["pushes"] += 1

    def push_received(self, i: int, nbytes: int) -> None:
        if self.measuring and self.honest[i]:
            self.c["down_ann"] += nbytes

    # -- fan-in and delivery (observers) -------------------------------------------------------
    def _honest_pub(self, ann, sim) -> int | None:
        j = sim.by_id.get(ann.peer)
        return j if j is not None and self.honest[j] else None

    def selected(self, i: int, ann, sim) -> None:
        if not self._obs(i):
            return
        j = self._honest_pub(ann, sim)
        self.c["selected"] += 1
        if j is None:
            self.c["selected_hostile"] += 1
            return
        self.pending[(i, ann.sha256)] = sim.now

    def failed(self, i: int, ann, sim) -> None:
        if self.pending.pop((i, ann.sha256), None) is not None:
            self.c["failed"] += 1

    def delivered(self, i: int, ann, sim) -> None:
        if not self._obs(i):
            return
        self.c["down_bundle"] += ann.nbytes + sim.costs.frame_bytes  # as bundle_bytes counts it upstream
        t_sel = self.pending.pop((i, ann.sha256), None)
        if t_sel is None:
            return
        j, t_pub, _ = sim.bundles[ann.sha256]
        self.waited.append(t_sel - t_pub)
        self.fetch_s.append(sim.now - t_sel)
        self.c["delivered"] += 1
        self.c["delivered_groups"] += ann.count
        self.c["delivered_nat"] += self.world[j].nat
        (self.visible_push if not ann.addrs else self.visible).append(sim.now - t_pub)

    def bundle_bytes(self, j: int, i: int, nbytes: int) -> None:
        if self._obs(i):
            self.up_bundles[j] += nbytes

    def took(self, i: int, got, sim) -> None:
        if not self._obs(i):
            return
        self.drops.update(got.drops)
        self.c["skipped"] += got.skipped
        for ann in got.records[:: max(1, self.s.groups)]:  # one per bundle (settled with `count` copies)
            info = sim.bundles.get(ann.sha256)
            if info is not None:
                j, t_pub, _ = info
                self.ages.append(sim.now - t_pub)
                self.lags.append(sim.rounds[j] - ann.policy_version)

    # -- the row ---------------------------------------------------------------------------------
    def finish(self, sim) -> None:
        s = self.s
        lo, hi = s.warmup_s, s.warmup_s + s.measure_s

        def online_s(p) -> float:
            return sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in p.sessions)
        self.peer_rounds = sum(online_s(p) for p in self.world if not p.hostile) / s.round_s
        self.obs_rounds = sum(online_s(self.world[i]) for i in self.observers if self.honest[i]) / s.round_s
        self.scale = sim.scale

    def row(self, sim) -> dict:
        s, c = self.s, self.c
        pr, orr = max(self.peer_rounds, 1e-9), max(self.obs_rounds, 1e-9)
        up_bundle = sum(v for j, v in self.up_bundles.items() if self.honest[j]) * self.scale / pr
        dht_serve = sum(v for j, v in self.holder_bytes.items() if self.honest[j]) / pr
        up_ann, down_ann, down_bundle = c["up_ann"] / pr, c["down_ann"] / pr, c["down_bundle"] / orr
        up_gossip, down_gossip = c["up_gossip"] / pr, c["down_gossip"] / pr  # gossipsub copies and control
        reqs = sorted(self.holder_req.values())
        resolved = c["delivered"] + c["failed"]
        vis = self.visible + self.visible_push
        return {
            "name": s.name, "transport": s.transport, "design": s.design or None, "peers": s.peers,
            "observers": len(self.observers), "busy_answers": c["busy_answers"],
            "shards": s.shards, "read_shards": s.read_shards,
            "bytes_up_per_round": up_ann + up_bundle + dht_serve + up_gossip,
            "bytes_down_per_round": down_ann + down_bundle + down_gossip,
            "gossip_up_per_round": up_gossip, "gossip_down_per_round": down_gossip,
            "ann_up_per_round": up_ann, "ann_down_per_round": down_ann, "dht_serve_up_per_round": dht_serve,
            "bundle_up_per_round": up_bundle, "bundle_down_per_round": down_bundle,
            "catch_up_down_per_round": c["down_catch_up"] / pr,  # part of ann_down: a (re)joining peer's first reads
            "dht_requests_per_round": (c["reads"] + c["stores"]) / pr, "dht_reads_per_round": c["reads"] / pr,
            "dht_read_kib_p50": (pct(self.dht_read_sizes, 0.5) or 0) / 1024,
            "holder_requests_per_s": (reqs[-1] if reqs else 0) / s.measure_s,
            "holder_requests_per_s_mean": (sum(reqs) / len(reqs) if reqs else 0) / s.measure_s,
            "holder_bytes_up_per_s_max": max(self.holder_bytes.values(), default=0) / s.measure_s,
            "delivery": c["delivered"] / resolved if resolved else None, "selected": c["selected"],
            "selected_hostile": c["selected_hostile"], "delivered": c["delivered"], "failed": c["failed"],
            "unresolved": len(self.pending), "groups_per_round": c["delivered_groups"] / orr,
            "nat_share_of_delivered": c["delivered_nat"] / c["delivered"] if c["delivered"] else None,
            "p50_visible_s": pct(vis, 0.5), "p95_visible_s": pct(vis, 0.95),
            "p95_visible_pulled_s": pct(self.visible, 0.95), "p95_visible_pushed_s": pct(self.visible_push, 0.95),
            "p50_publish_to_chosen_s": pct(self.waited, 0.5), "p95_publish_to_chosen_s": pct(self.waited, 0.95),
            "p50_chosen_to_visible_s": pct(self.fetch_s, 0.5), "p95_chosen_to_visible_s": pct(self.fetch_s, 0.95),
            "age_at_train_p50_s": pct(self.ages, 0.5), "age_at_train_p95_s": pct(self.ages, 0.95),
            "version_lag_mean": sum(self.lags) / len(self.lags) if self.lags else None,
            "version_lag_p95": pct(self.lags, 0.95), "skipped_per_round": c["skipped"] / orr,
            "drops": dict(self.drops), "joins": self.joins, "leaves": self.leaves,
            "published": c["published"], "published_nat": c["published_nat"], **s.extra,
        }


def figure(rows: list[dict], path) -> None:
    """Per-peer bytes up/down per round and publish → visible p95 against N, one line per setting family."""
    plt = pyplot()

    fams = sorted({r["name"] for r in rows if r["peers"] >= 100})
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4.2))
    for fam in fams:
        rs = sorted((r for r in rows if r["name"] == fam), key=lambda r: r["peers"])
        n = [r["peers"] for r in rs]
        ax1.plot(n, [r["bytes_down_per_round"] / 1024 for r in rs], "o-", label=f"{fam} down")
        ax1.plot(n, [r["bytes_up_per_round"] / 1024 for r in rs], "x--", label=f"{fam} up")
        ax2.plot(n, [r["p95_visible_s"] or 0 for r in rs], "o-", label=fam)
        ax3.plot(n, [r["holder_requests_per_s"] for r in rs], "o-", label=fam)
    for ax, title in ((ax1, "KiB per peer per round"), (ax2, "publish → visible p95 (s)"),
                      (ax3, "requests/s at the busiest key holder")):
        ax.set_xscale("log")
        ax.set_xlabel("peers")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    ax1.set_yscale("log")
    ax3.set_yscale("log")
    ax2.axhline(2.0, color="grey", ls=":")
    ax1.legend(fontsize=7)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
