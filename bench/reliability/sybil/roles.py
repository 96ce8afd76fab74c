"""The processes of bench/reliability/sybil/__main__.py (its docstring says what each does): the honest peers, the throwaway
identities, and the victim.

    python -m bench.reliability.sybil.roles honest|sybils|victim --initial-peer MADDR --swarm-id ID [...]

Each prints one JSON line {"ready": ...} once started, then takes words on stdin: "go" (start), "late"
(the held-back honest peer joins), "stop". The victim prints one JSON line per measured window.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import sys
import threading
import time
from collections import Counter
from functools import partial
from pathlib import Path

from bench.harness.identities import cached_keys, many_keys_validator

WINDOW_S = 10.0
B, G, T = 8, 8, 24  # a bundle: groups × completions × tokens
PERIOD_S = 5.0  # an honest peer publishes every PERIOD_S


def _emit(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


_LATE, _GO = threading.Event(), threading.Event()  # set when the parent writes "late" / "go"


def _stdin_lines() -> threading.Event:
    """An event set when the parent writes 'stop' (or closes our stdin); 'late' and 'go' set _LATE and _GO."""
    stop = threading.Event()

    def watch() -> None:
        for line in sys.stdin:
            word = line.strip()
            if word == "stop":
                break
            {"late": _LATE, "go": _GO}.get(word, threading.Event()).set()
        stop.set()
    threading.Thread(target=watch, daemon=True).start()
    return stop


# ---------------------------------------------------------------- the honest peers (one process)

def honest(args) -> None:
    from bench.harness.peers import synthetic_records
    from swarm.config import SwarmConfig
    from swarm.exchange.hivemind import HivemindTransport

    cfg = SwarmConfig(enabled=True, swarm_id=args.swarm_id, initial_peers=[args.initial_peer], startup_timeout_s=180)
    peers = [HivemindTransport(cfg=cfg) for _ in range(args.n)]
    _emit({"ready": [p.peer_id for p in peers]})
    late = peers[len(peers) - args.late:]  # silent until the parent says "late" (a newcomer)
    stop, joined = _stdin_lines(), _LATE
    rng = random.Random(0)
    offsets = {p.peer_id: rng.uniform(0, PERIOD_S) for p in peers}
    t0, r = time.monotonic(), 0
    while not stop.is_set():
        for p in peers:
            if p in late and not joined.is_set():
                continue
            due = t0 + offsets[p.peer_id] + r * PERIOD_S
            if stop.wait(max(0.0, due - time.monotonic())):
                break
            p.publish(synthetic_records(p.peer_id, r, rng, args.swarm_id))
            p.take()  # what a round does; honest peers also fetch each other
        r += 1
    for p in peers:
        p.shutdown()


# ---------------------------------------------------------------- the throwaway identities (one process)

_SYBILS: dict = {}  # set before the DHT process forks: it builds and stores the announcements itself


async def _announce_window(_dht, node, swarm_id: str, window: int, now: float, seed: int) -> int:
    """Runs inside the DHT process (hivemind's pipe breaks on messages of ~70 KB: nothing big crosses it)."""
    from protocols.announce import encode_announcement
    from protocols.keys import rollouts_key, shard_of
    from protocols.records import Announcement

    rng = random.Random(seed)
    keys, values = [], []
    for i, pid in enumerate(_SYBILS["ids"]):
        ann = Announcement(peer=pid, window=window, count=B, nbytes=rng.randrange(20_000, 60_000),
                           sha256=f"{rng.getrandbits(256):064x}", policy_version=0, created_at=now,
                           addrs=_SYBILS["addrs"][i % 2])
        keys.append(rollouts_key(swarm_id, window, shard_of(pid, 4)))
        values.append(encode_announcement(ann))
    done = await node.store_many(keys, values, expiration_time=now + 600, subkeys=_SYBILS["subkeys"])
    return sum(bool(v) for v in done.values())


def sybils(args) -> None:
    from hivemind import DHT

    from protocols.keys import window_of
    from swarm.net.identity import owner_subkey, peer_id_of_key

    started = time.monotonic()
    keys = cached_keys(args.n)
    ids = [peer_id_of_key(k) for k in keys]
    subkeys = [owner_subkey(k) for k in keys]
    tarpit = socket.socket()
    tarpit.bind(("127.0.0.1", 0))
    tarpit.listen(4096)
    held = []  # connections the tarpit accepted and never answers

    def hold() -> None:
        while True:
            held.append(tarpit.accept())
    threading.Thread(target=hold, daemon=True).start()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    addrs = [f"/ip4/127.0.0.1/tcp/{tarpit.getsockname()[1]}", f"/ip4/127.0.0.1/tcp/{closed_port}"]
    _SYBILS.update(ids=ids, subkeys=subkeys, addrs=addrs)
    dht = DHT(initial_peers=[args.initial_peer], start=True, client_mode=True, startup_timeout=180,
              host_maddrs=["/ip4/127.0.0.1/tcp/0"], record_validators=[many_keys_validator(keys)])
    _emit({"ready": time.monotonic() - started})
    stop = _stdin_lines()
    while not (_GO.wait(0.2) or stop.is_set()):
        pass
    while not stop.is_set():
        now = time.time()
        w = window_of(now, WINDOW_S)
        stored = dht.run_coroutine(partial(_announce_window, swarm_id=args.swarm_id, window=w, now=now, seed=w))
        _emit({"window": w, "stored": stored, "store_s": time.time() - now})
        stop.wait(max(0.0, (w + 1) * WINDOW_S + 1.0 - time.time()))
    dht.shutdown()


# ---------------------------------------------------------------- the victim (one process)

def victim(args) -> None:
    import psutil

    from swarm.config import SwarmConfig
    from swarm.exchange.hivemind import HivemindTransport

    listed = json.loads(Path(args.honest_ids).read_text())
    honest_ids, late_ids = set(listed), set(listed[len(listed) - args.late:])
    t = HivemindTransport(cfg=SwarmConfig(enabled=True, swarm_id=args.swarm_id, initial_peers=[args.initial_peer],
                                          startup_timeout_s=180))
    counts: Counter = Counter()
    inbox = t.inbox
    offer, choose, settle = inbox.offer, inbox.choose, inbox.settle_fetched

    def counted_offer(*a, **kw):  # one call per announcement entry read (or pushed) and vetted
        counts["entries_read"] += 1
        return offer(*a, **kw)

    def counted_choose(now):
        chosen = choose(now)
        for ann in chosen:
            counts["fetch_honest" if ann.peer in honest_ids else "fetch_sybil"] += 1
            counts["fetch_late"] += ann.peer in late_ids
        return chosen

    def counted_settle(ann, data, *a, **kw):
        counts[("ok_" if data is not None else "failed_") + ("honest" if ann.peer in honest_ids else "sybil")] += 1
        return settle(ann, data, *a, **kw)

    inbox.offer, inbox.choose, inbox.settle_fetched = counted_offer, counted_choose, counted_settle
    poll = t._poll_once

    async def counted_poll(tick):
        counts["ticks"] += 1
        return await poll(tick)

    t._poll_once = counted_poll
    me = psutil.Process()

    def usage() -> dict:
        out = {}
        for p in [me, *me.children(recursive=True)]:
            try:
                role = "node" if p.pid == me.pid else ("p2pd" if "p2pd" in p.name() else "dht")
                c, m = p.cpu_times(), p.memory_info().rss
            except psutil.Error:
                continue
            out[f"cpu_{role}"] = out.get(f"cpu_{role}", 0.0) + c.user + c.system
            out[f"rss_{role}_mb"] = out.get(f"rss_{role}_mb", 0.0) + m / 2**20
        return out

    _emit({"ready": True})
    sys.stdin.readline()  # go
    edge = (int(time.time() // WINDOW_S) + 1) * WINDOW_S
    time.sleep(max(0.0, edge - time.time()))
    t.take()
    before, seen = usage(), Counter(counts)
    from bench.harness.peers import synthetic_records

    rng = random.Random(2)
    for w in range(args.windows):
        time.sleep(max(0.0, edge + (w + 1) * WINDOW_S - time.time()))
        t.publish(synthetic_records(t.peer_id, w, rng, args.swarm_id))  # a node publishes its round too
        got = t.take()
        used = Counter(r.peer for r in got.records if r.peer in honest_ids)
        if hasattr(t, "judge"):  # what a node's ingest reports back (the previous commit had no judge)
            t.judge({p: (n, 0) for p, n in used.items()})
        now_usage, now_counts = usage(), Counter(counts)
        row = {"window": w, "honest_groups": sum(used.values()), "late_groups": sum(used[p] for p in late_ids),
               **{k: now_counts[k] - seen[k] for k in ("fetch_honest", "fetch_sybil", "fetch_late", "ok_honest",
                                                       "failed_sybil",
                                                       "entries_read", "ticks")},
               **{k: round(now_usage.get(k, 0.0) - before.get(k, 0.0), 3) for k in ("cpu_node", "cpu_dht", "cpu_p2pd")},
               **{k: round(v, 1) for k, v in now_usage.items() if k.startswith("rss_")},
               "drops": dict(got.drops), "peers_tracked": len(inbox._peers),
               "standing_entries": len(getattr(inbox, "standing", ())),
               "candidates": sum(len(q) for q in inbox._candidates.values()),
               "vetted": len(getattr(inbox, "_vetted", getattr(inbox, "_seen", {})))}
        before, seen = now_usage, now_counts
        _emit(row)
    t.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description="one process of bench/reliability/sybil/__main__.py")
    ap.add_argument("role", choices=["honest", "sybils", "victim"])
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--late", type=int, default=0)
    ap.add_argument("--windows", type=int, default=6)
    ap.add_argument("--initial-peer", required=True)
    ap.add_argument("--swarm-id", required=True)
    ap.add_argument("--honest-ids")
    args = ap.parse_args()
    {"honest": honest, "sybils": sybils, "victim": victim}[args.role](args)


if __name__ == "__main__":
    main()
