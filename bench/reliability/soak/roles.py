"""The hostile peers of bench/reliability/soak/__main__.py, each a real hivemind peer on 127.0.0.1 (the attacks: bench/harness/attacks.py).

    python -m bench.reliability.soak.roles ROLE --initial-peer MADDR --swarm-id ID [--period-s 5]

ghost    a throwaway identity announces one bundle and leaves at once: its announcement stays in the DHT
         (for swarm.max_age_s) and every fetch of it fails.
garbage  a live peer that publishes a bundle every --period-s until SIGINT/SIGTERM; every record is one a
         node must drop (another model's fingerprint, prompts that are not the task's question, random ids).
The exhaustion attackers (docs/benchmarks/reliability.md §15B), each until SIGINT/SIGTERM:
bomber   publishes a decode bomb (~6 KB of zstd, ~2^21 equal tokens) every --period-s, pushed to its peers
relay    fetches the honest peers' bundles and pushes their records to every peer under its own id, ten
         times a second (a client-mode push: no address named), to take their fetches and standing
staller  keeps eight pushes open at each peer, sending one byte a second
leech    fetches each bundle it sees again and again, twenty streams at once
dialer   32 throwaway identities announce bundles nobody serves, naming a local tarpit as their address
flooder  stores 1,000 unsigned entries under each shard of the current windows' announcement keys
bloater  publishes records whose model name is 4 M characters, every --period-s
"""

from __future__ import annotations

import argparse
import random
import signal
import threading
import time


def _transport(args):
    """A transport joined to the swarm; a hostile peer that finds the bootstrap down tries again (≤ 10 min)."""
    from swarm.config import SwarmConfig
    from swarm.dht.peer import BootstrapUnreachable
    from swarm.exchange.hivemind import HivemindTransport

    cfg = SwarmConfig(enabled=True, swarm_id=args.swarm_id, initial_peers=[args.initial_peer], startup_timeout_s=60,
                      dht_timeout_s=10)
    deadline = time.monotonic() + 600
    while True:
        try:
            return HivemindTransport(cfg=cfg)
        except BootstrapUnreachable as exc:
            if time.monotonic() > deadline:
                raise SystemExit(f"{args.role}: {exc}") from None
            print(f"{args.role}: the bootstrap did not answer; trying again", flush=True)
            time.sleep(5)


def ghost(args) -> None:
    from bench.harness.peers import synthetic_records

    t = _transport(args)
    t.publish(synthetic_records(t.peer_id, 0, random.Random(), args.swarm_id))
    t.flush(timeout=60)
    print(f"ghost {t.peer_id} announced one bundle and leaves", flush=True)
    t.shutdown()


def garbage(args) -> None:
    from bench.harness.peers import synthetic_records

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    t = _transport(args)
    print(f"garbage sender {t.peer_id} publishes every {args.period_s} s", flush=True)
    rng, r = random.Random(), 0
    while not stop.is_set():
        t.publish(synthetic_records(t.peer_id, r, rng, args.swarm_id))
        t.take()  # drain what peers pushed to us, as a node would
        r += 1
        stop.wait(args.period_s)
    print(f"garbage sender leaves after {r} bundles", flush=True)
    t.shutdown()


def _until_stopped(args, step, what: str) -> None:
    """Run `step(t, k)` every --period-s on a transport of ours until SIGINT/SIGTERM; count and print what it did."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    t = _transport(args)
    t.publish([])  # a hello: the peers learn of us, and we of them
    print(f"{args.role} {t.peer_id}: {what}, every {args.period_s} s", flush=True)
    k, tally = 0, {}
    while not stop.is_set():
        try:
            for key, n in (step(t, k) or {}).items():
                tally[key] = tally.get(key, 0) + n
        except Exception as exc:  # an attack that fails goes on: a peer of ours never stops a soak
            tally[type(exc).__name__] = tally.get(type(exc).__name__, 0) + 1
        k += 1
        stop.wait(args.period_s)
    print(f"{args.role} leaves after {k} steps: {tally}", flush=True)
    t.shutdown()


def _peers_of(t) -> list[tuple[str, list[str]]]:
    return [(p, t.inbox.addrs_of(p)) for p in t.inbox.known_peers()][:8]


def bomber(args) -> None:
    from bench.harness.attacks import bomb_bundle, publish_raw
    from bench.harness.peers import synthetic_records

    def step(t, k):
        t.take()
        honest = synthetic_records(t.peer_id, k, random.Random(k), args.swarm_id)[0]
        data, count = bomb_bundle(honest)
        publish_raw(t, data, count, addrs="")  # no address: pushed as offers, and announced in the DHT
        return {"bombs": 1}
    _until_stopped(args, step, "publishes a decode bomb")


def relay(args) -> None:
    import asyncio
    from dataclasses import replace

    from bench.harness.attacks import offer
    from protocols.codec import encode_bundle

    def step(t, k):
        got = t.take()
        records = [replace(r, peer=t.peer_id) for r in got.records][:8]
        if not records:
            return {}
        data = encode_bundle(records)
        answers = [asyncio.run_coroutine_threadsafe(offer(t, p, addrs, data, len(records)), t._loop).result(30)
                   for p, addrs in _peers_of(t)]
        return {a[:8]: 1 for a in answers}
    _until_stopped(args, step, "relays honest records under its own id")


def staller(args) -> None:
    import asyncio

    from bench.harness.attacks import slow_offer
    from bench.harness.peers import synthetic_records
    from protocols.codec import encode_bundle

    def step(t, k):
        t.take()
        jobs = []
        for p, addrs in _peers_of(t):
            for i in range(8):
                data = encode_bundle(synthetic_records(t.peer_id, 1000 * k + i, random.Random(k * 8 + i),
                                                       args.swarm_id)[:1])
                jobs.append(asyncio.run_coroutine_threadsafe(slow_offer(t, p, addrs, data, 1, hold_s=30), t._loop))
        return {"stalled": len(jobs)}
    _until_stopped(args, step, "holds pushes open")


def leech(args) -> None:
    import asyncio

    from bench.harness.attacks import refetch

    def step(t, k):
        t.take()
        with t.inbox.cond:
            fetched = list(t.inbox._fetched)[-4:]  # (peer, sha256) of the newest bundles we fetched
        jobs = [asyncio.run_coroutine_threadsafe(refetch(t, peer, t.inbox.addrs_of(peer), sha, 20, args.swarm_id,
                                                         t.dials), t._loop) for peer, sha in fetched]
        out = {}
        for job in jobs:
            for status in job.result(120):
                out[status[:8]] = out.get(status[:8], 0) + 1
        return out
    _until_stopped(args, step, "re-fetches bundles, twenty streams at once")


def dialer(args) -> None:
    import socket

    from bench.harness.attacks import Ghosts
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    tarpit = socket.socket()
    tarpit.bind(("127.0.0.1", 0))
    tarpit.listen(4096)
    accepted = [0]

    def hold() -> None:
        while True:
            tarpit.accept()
            accepted[0] += 1
    threading.Thread(target=hold, daemon=True).start()
    ghosts = Ghosts(32, args.initial_peer, addrs=f"/ip4/127.0.0.1/tcp/{tarpit.getsockname()[1]}")
    print(f"dialer: 32 ghosts naming tarpit port {tarpit.getsockname()[1]}", flush=True)
    while not stop.is_set():
        ghosts.announce(args.swarm_id, 4)
        print(f"dialer: connections at the tarpit so far: {accepted[0]}", flush=True)
        stop.wait(10.0)
    ghosts.shutdown()
    print(f"dialer leaves: {accepted[0]} connections at the tarpit", flush=True)


def flooder(args) -> None:
    from hivemind import DHT

    from bench.harness.attacks import flood_unsigned
    from protocols.keys import window_of
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    dht = DHT(initial_peers=[args.initial_peer], start=True, startup_timeout=120, host_maddrs=["/ip4/127.0.0.1/tcp/0"])
    while not stop.is_set():
        w = window_of(time.time(), 10.0)
        n = flood_unsigned(dht, args.swarm_id, windows=[w, w + 1], shards=4, per_key=1000)
        print(f"flooder: window {w}: {n} unsigned stores accepted", flush=True)
        stop.wait(10.0)
    dht.shutdown()


def bloater(args) -> None:
    from bench.harness.attacks import bloat_record
    from bench.harness.peers import synthetic_records

    def step(t, k):
        t.take()
        t.publish([bloat_record(r) for r in synthetic_records(t.peer_id, k, random.Random(k), args.swarm_id)[:1]])
        return {"bloated": 1}
    _until_stopped(args, step, "publishes 4 M-character model names")


ROLES = {"ghost": ghost, "garbage": garbage, "bomber": bomber, "relay": relay, "staller": staller, "leech": leech,
         "dialer": dialer, "flooder": flooder, "bloater": bloater}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("role", choices=list(ROLES))
    ap.add_argument("--initial-peer", required=True)
    ap.add_argument("--swarm-id", required=True)
    ap.add_argument("--period-s", type=float, default=5.0)
    args = ap.parse_args()
    started = time.monotonic()
    ROLES[args.role](args)
    print(f"{args.role} done after {time.monotonic() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
