"""The simulation's costs, taken from the real code and the real measurements (docs/benchmarks/exchange.md §7).

    sizes      one lab-round bundle (bench.exchange.gossip's records → swarm.exchange.receive.make_bundle), its announcement,
               and the signed DHT entry that carries it (hivemind's RSASignatureValidator on a fresh key)
    overhead   the processing delay per RPC, fitted so that the simulated 4-peer "latency, push" run of
               bench/exchange/gossip.py has the real run's publish → visible p50 (bench/results/exchange/gossip.json): two
               runs (no overhead, 50 ms) and the straight line through them
    compare    every row of the real gossip benchmark re-run in the simulator on a loopback network
               (RTT 0.1–0.2 ms, 1 Gbit/s, no NAT, churn, skew or hostile peers) with the poll plan the
               real runs had (bench.scale.legacy), side by side with the real numbers
"""

from __future__ import annotations

import json
import random
from dataclasses import replace

from bench.harness.output import results_dir
from bench.scale.model import Costs, Setting
from bench.scale.sim import T0, simulate
from protocols.keys import rollouts_key

GOSSIP = results_dir("exchange") / "gossip.json"
PROBE_S = 0.05  # the second overhead tried by the fit


def measure_costs(groups: int = 8) -> Costs:
    from hivemind.dht.crypto import RSASignatureValidator
    from hivemind.dht.routing import DHTID
    from hivemind.dht.validation import DHTRecord
    from hivemind.utils.serializer import MSGPackSerializer

    from bench.harness.peers import synthetic_records
    from swarm.exchange.receive import make_bundle

    peer = "QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N"
    records = synthetic_records(peer, 3, random.Random(0), "rlswarm")[:groups]
    data, value, ann = make_bundle(peer, records, now=T0, addrs="/ip4/203.0.113.7/tcp/31337")
    validator = RSASignatureValidator()
    key = rollouts_key("rlswarm", ann.window, 0)
    subkey = MSGPackSerializer.dumps(validator.local_public_key)
    signed = validator.sign_value(DHTRecord(key=DHTID.generate(source=key).to_bytes(), subkey=subkey, value=value,
                                            expiration_time=T0 + 600))
    entry = len(signed) + len(subkey) + len(MSGPackSerializer.dumps(T0 + 600.0)) + 2
    return Costs(bundle_bytes=len(data), announcement_bytes=len(value), entry_bytes=entry)


def loopback(name: str, peers: int, *, budget: int, notify: int, rounds: int = 8, period: float = 5.0) -> Setting:
    return Setting(name=name, peers=peers, rtt_ms=(0.1, 0.2), up_mbit=(1000.0, 1000.0), nat=0.0, hostile=0.0,
                   churn=False, skew_s=0.0, round_s=period, budget=budget, notify=notify, warmup_s=3 * period,
                   measure_s=rounds * period, plan="legacy", observers=peers, seed=peers)


def real_rows() -> list[dict]:
    return json.loads(GOSSIP.read_text())["rows"] if GOSSIP.exists() else []


def fit_overhead(costs: Costs) -> tuple[float, dict]:
    """The per-RPC delay that makes the simulated 4-peer push run's p50 the real one's."""
    real = next((r for r in real_rows() if r["part"] == "latency, push" and r["peers"] == 4), None)
    if real is None:
        return 0.0, {"note": "bench/results/exchange/gossip.json has no 4-peer push row: no overhead"}
    setting = loopback("fit", 4, budget=100_000, notify=8)
    p0 = simulate(setting, replace(costs, overhead_s=0.0))["p50_visible_s"]
    p1 = simulate(setting, replace(costs, overhead_s=PROBE_S))["p50_visible_s"]
    slope = (p1 - p0) / PROBE_S
    fitted = min(0.5, max(0.0, (real["pair_p50_s"] - p0) / slope)) if slope > 0 else 0.0
    return fitted, {"real_p50_s": real["pair_p50_s"], "sim_p50_at_0_s": p0, f"sim_p50_at_{PROBE_S}_s": p1,
                    "overhead_s": fitted}


def compare(costs: Costs) -> list[dict]:
    """Each real gossip row next to the same run simulated."""
    out = []
    for r in real_rows():
        s = loopback(f"calib {r['part']}", r["peers"], budget=r["budget"], notify=r["notify"],
                     period=r.get("period_s", 5.0))
        sim = simulate(s, costs)
        out.append({"part": r["part"], "peers": r["peers"], "budget": r["budget"], "notify": r["notify"],
                    "real_kb_per_round": r["kb_per_round"], "sim_kb_per_round": sim["bundle_down_per_round"] / 1024,
                    "real_p50_s": r["pair_p50_s"], "sim_p50_s": sim["p50_visible_s"],
                    "real_p95_s": r["pair_p95_s"], "sim_p95_s": sim["p95_visible_s"],
                    "real_load_avg_1m": r.get("load_avg_1m"), "sim_delivery": sim["delivery"],
                    "sim_dht_reads_per_round": sim["dht_reads_per_round"],
                    "sim_ann_down_kb_per_round": sim["ann_down_per_round"] / 1024})
    return out
