"""The hostile peers of bench/soak.py: a ghost and a garbage sender, each a real hivemind peer on 127.0.0.1.

    python -m bench.soak_roles ghost|garbage --initial-peer MADDR --swarm-id ID [--period-s 5]

ghost    a throwaway identity announces one bundle and leaves at once: its announcement stays in the DHT
         (for swarm.max_age_s) and every fetch of it fails.
garbage  a live peer that publishes a bundle every --period-s until SIGINT/SIGTERM; every record is one a
         node must drop (another model's fingerprint, prompts that are not the task's question, random ids).
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
    from swarm.dht import BootstrapUnreachable
    from swarm.hivemind_transport import HivemindTransport

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
    from bench.gossip import synthetic_records

    t = _transport(args)
    t.publish(synthetic_records(t.peer_id, 0, random.Random(), args.swarm_id))
    t.flush(timeout=60)
    print(f"ghost {t.peer_id} announced one bundle and leaves", flush=True)
    t.shutdown()


def garbage(args) -> None:
    from bench.gossip import synthetic_records

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("role", choices=["ghost", "garbage"])
    ap.add_argument("--initial-peer", required=True)
    ap.add_argument("--swarm-id", required=True)
    ap.add_argument("--period-s", type=float, default=5.0)
    args = ap.parse_args()
    started = time.monotonic()
    {"ghost": ghost, "garbage": garbage}[args.role](args)
    print(f"{args.role} done after {time.monotonic() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
