"""A gossip spammer on real hivemind peers (127.0.0.1, no model): what a peer publishing 100× its share costs the
honest peers, with and without our guard (swarm.exchange.gossip_guard).

`--peers` real HivemindTransport peers with `swarm.gossip` on and a bootstrap that relays the topic (`swarm
bootstrap --gossip`): `--peers` − 1 honest ones in one worker process and one more peer in another. Every peer
behaves like a node without a model, as in bench/exchange/capacity.py (bench.harness.peers.run_peer: one lab-round
bundle of ≈ 8.9 kB every `--period` seconds, a take after each, the default fan-in budget and pushes). Arms, each
on a fresh swarm and bootstrap, the same `--duration` measured after a `--warmup`:

    none         the extra peer is honest too (its share: one announcement per period)
    spam         it also publishes `--factor` − 1 more announcements per period straight from its transport
                 (Pubsub.publish on the swarm's topic, protocols.keys.announce_topic): valid-looking, signed by its
                 own key, the size of its real ones, each naming a bundle it does not serve; no guard
                 (`swarm.gossip_ban_s` 0 on every peer)
    spam+guard   the same spammer; every peer's guard with `swarm.gossip_ban_s` 300 (since issue 49 a ban drops the
                 signer's gossip unread and disconnects no one, and the bootstrap judges no one: the results of
                 docs/benchmarks/scale.md §16D were measured before, with bans that also disconnected, on the bootstrap too)
    fresh+guard  the same rate, each announcement under a fresh identity (a new ed25519 key per message, naming
                 itself as `peer` and the extra peer's addresses, or none with `--fresh-addrs none`), written as raw
                 gossipsub RPCs (`/meshsub/1.1.0`) by a plain p2pd (no pubsub of its own) connected to every peer the
                 extra peer's daemon sees on the topic — as a flood-publishing daemon would send it; the guard at
                 300 s. Each message is ≈ 500 bytes shorter than a loud one (an ed25519 signature and no key field,
                 against an RSA key and signature)
    dht          no gossip at all (`swarm.gossip` off, the bootstrap relays nothing): every peer polls the DHT at
                 the full rate, the floor a peer that leaves the topic falls back to

Per honest peer, over the measured seconds:

    gossip_msgs_per_s    messages its subscription delivered (GossipAnnouncements.received)
    gossip_kib_per_s     their data bytes (GossipAnnouncements.received_bytes)
    p2pd_kib_per_s       bytes its p2pd read and wrote, rchar + wchar of /proc/<pid>/io: every read and write
                         system call of the daemon, network and its control socket together (p2pd has no traffic
                         counters; a proxy of what the peer carries, gossip forwarding included)
    bundle_kib_per_s     bundle bytes it fetched (Delivery.bytes)
    bundle_kib_per_s_spammed  the same over the rounds that start once the spammer runs (`--spam-after` s into
                         the measured time; 0: all of them)
    spammer_connected    share of samples (every 2 s) in which its p2pd had a connection to the extra peer

and the guard's counter (bans), the drops by reason, and the ratio of each arm's mean to `none`'s.

    python -m bench.exchange.spam [--arms none spam spam+guard fresh+guard dht] [--duration 90] [--period 10]
                                  [--factor 100] [--spam-after 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.harness.attacks import publish_rpc, uvarint
from bench.harness.output import results_dir, table, write_json

RESULTS = results_dir("exchange")
# arm → (gossip, spam: "" none, "loud" one identity, "fresh" a fresh identity per message, gossip_ban_s)
ARMS = {"none": (True, "", 0.0), "spam": (True, "loud", 0.0), "spam+guard": (True, "loud", 300.0),
        "fresh+guard": (True, "fresh", 300.0), "dht": (False, "", 0.0)}
MESHSUB = "/meshsub/1.1.0"
METRICS = ("gossip_msgs_per_s", "gossip_kib_per_s", "p2pd_kib_per_s", "bundle_kib_per_s")
SAMPLE_S = 2.0


# ---------------------------------------------------------------- worker (honest peers, or the extra peer)

def p2pd_io(t) -> int:
    """rchar + wchar of the transport's p2pd (a child of its DHT process)."""
    import psutil

    for child in psutil.Process(t.dht.pid).children(recursive=True):
        if child.name() == "p2pd":
            with open(f"/proc/{child.pid}/io") as f:
                io = dict(line.split(": ") for line in f.read().splitlines())
            return int(io["rchar"]) + int(io["wchar"])
    return 0


def spam(t, t0: float, args, log: dict) -> None:
    """Publish (factor − 1) announcements per period on the swarm's topic, straight from the transport's pubsub."""
    from protocols.announce import encode_announcement
    from protocols.keys import window_of
    from protocols.records import Announcement

    every = args.period / (args.factor - 1)
    n, futures = 0, []
    while True:
        at = t0 + args.spam_after + n * every
        if at >= t0 + args.duration:
            break
        time.sleep(max(0.0, at - time.monotonic()))
        now = time.time()
        ann = Announcement(peer=t.peer_id, window=window_of(now, t.cfg.window_s), count=64, nbytes=9000 + n % 100,
                           sha256=secrets.token_hex(32), policy_version=n, created_at=now, addrs=t.addrs)
        futures.append(t.submit(t.gossip.pubsub.publish(t.gossip.plan.home, encode_announcement(ann))))
        n += 1
    failed = 0
    for f in futures:
        try:
            f.result(30)
        except Exception:  # counted: a refused or timed-out publish
            failed += 1
    log["spam"] = {"published": n, "failed": failed, "per_s": n / (args.duration - args.spam_after)}


def fresh_message(topic: str, data_of) -> bytes:
    """One varint-framed gossipsub RPC publishing a message signed by a new ed25519 identity: go-libp2p-pubsub's
    signature ("libp2p-pubsub:" + the message without signature and key), the key inlined in the peer id."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
    from hivemind.p2p.p2p_daemon_bindings.datastructures import PeerID
    from hivemind.proto import crypto_pb2
    from hivemind.proto import p2pd_pb2 as pb

    key = Ed25519PrivateKey.generate()
    raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    public = crypto_pb2.PublicKey(key_type=crypto_pb2.Ed25519, data=raw).SerializeToString()
    peer_id = b"\x00" + uvarint(len(public)) + public  # identity multihash: the peer id of an ed25519 key
    msg = pb.PSMessage(data=data_of(PeerID(peer_id).to_base58()), seqno=secrets.token_bytes(8), topicIDs=[topic])
    setattr(msg, "from", peer_id)
    msg.signature = key.sign(b"libp2p-pubsub:" + msg.SerializeToString())
    return publish_rpc([msg.SerializeToString()])


async def _fresh_spam(t, t0: float, args, log: dict) -> None:
    """The `fresh` spammer on the transport's loop: a plain p2pd dials every peer the transport's daemon sees on the
    topic, opens one raw gossipsub stream to each and writes each fresh-identity message to all of them."""
    from hivemind.p2p import P2P
    from hivemind.p2p.p2p_daemon_bindings.datastructures import PeerID
    from protocols.announce import encode_announcement
    from protocols.keys import window_of
    from protocols.records import Announcement

    topic = t.gossip.plan.home
    raw = await P2P.create(host_maddrs=["/ip4/127.0.0.1/tcp/0"], dht_mode="client", auto_nat=False,
                           nat_port_map=False, startup_timeout=60)
    streams, n, failed = [], 0, 0
    try:
        addrs = {p.peer_id.to_base58(): p.addrs for p in await t.p2p.list_peers()}
        for pid in await t.gossip.pubsub.peers(topic):
            if pid in addrs:
                await raw._client.connect(PeerID.from_base58(pid), addrs[pid])
                streams.append((await raw._client.stream_open(PeerID.from_base58(pid), [MESHSUB]))[2])
        every = args.period / (args.factor - 1)
        while (at := t0 + args.spam_after + n * every) < t0 + args.duration:
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            now = time.time()

            def value(peer: str) -> bytes:
                return encode_announcement(Announcement(
                    peer=peer, window=window_of(now, t.cfg.window_s), count=64, nbytes=9000 + n % 100,
                    sha256=secrets.token_hex(32), policy_version=n, created_at=now,
                    addrs=t.addrs if args.fresh_addrs == "own" else ""))

            frame = fresh_message(topic, value)
            for s in streams:
                try:
                    s.write(frame)
                    await s.drain()
                except (ConnectionError, OSError):  # counted: a stream the receiver reset
                    failed += 1
            n += 1
    finally:
        for s in streams:
            s.close()
        await raw.shutdown()
    log["spam"] = {"published": n, "failed": failed, "per_s": n / (args.duration - args.spam_after), "identities": n,
                   "streams": len(streams), "message_bytes": len(frame) if n else 0}


def spam_fresh(t, t0: float, args, log: dict) -> None:
    time.sleep(max(0.0, t0 + args.spam_after - time.monotonic()))
    t.run_on_loop(_fresh_spam(t, t0, args, log), args.duration + 120)


def sample_connected(peers, spammer: str, t0: float, until: float, samples: dict) -> None:
    """Every SAMPLE_S: is each peer's p2pd connected to the spammer?"""
    time.sleep(max(0.0, t0 - time.monotonic()))
    while time.monotonic() < until:
        for t in peers:
            try:
                ids = {p.peer_id.to_base58() for p in t.run_on_loop(t.p2p.list_peers(), 5)}
            except Exception:  # a slow daemon: this sample is skipped
                continue
            samples.setdefault(t.peer_id, []).append(spammer in ids)
        time.sleep(SAMPLE_S)


def snapshot(t) -> dict:
    g = t.gossip
    return {"received": g.received if g else 0, "received_bytes": g.received_bytes if g else 0,
            "banned": g.banned if g else 0, "io": p2pd_io(t),
            "t": time.monotonic()}


def worker(args) -> None:
    from bench.harness.peers import run_peer
    from swarm.config import SwarmConfig
    from swarm.exchange.hivemind import HivemindTransport

    cfg = SwarmConfig(enabled=True, swarm_id=args.swarm_id, initial_peers=[args.initial_peer], startup_timeout_s=180,
                      gossip=args.gossip, gossip_ban_s=args.ban_s)
    peers = [HivemindTransport(cfg=cfg) for _ in range(args.peers)]
    print(json.dumps({"ready": [t.peer_id for t in peers]}), flush=True)
    t0 = float(sys.stdin.readline())
    rounds = round(args.duration / args.period)
    log: dict = {"publishes": [], "rounds": [], "drops": {}, "connected": {}}
    time.sleep(max(0.0, t0 - time.monotonic()))
    before = {t.peer_id: snapshot(t) for t in peers}
    threads = [threading.Thread(target=run_peer, args=(t, t0, rounds, args.period, log, random.Random(t.peer_id)),
                                kwargs={"judge": args.judge}) for t in peers]
    if args.spam:
        threads.append(threading.Thread(target=spam if args.spam == "loud" else spam_fresh,
                                        args=(peers[0], t0, args, log)))
    if args.spammer:
        threads.append(threading.Thread(target=sample_connected, args=(peers, args.spammer, t0, t0 + args.duration,
                                                                       log["connected"])))
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    after = {t.peer_id: snapshot(t) for t in peers}
    log["peers"] = {p: {"before": before[p], "after": after[p]} for p in before}
    log["guard"] = {t.peer_id: t.gossip.guard.banned_peers() if t.gossip else [] for t in peers}
    time.sleep(1.0)
    for t in peers:
        t.shutdown()
    with open(args.out, "w") as f:
        json.dump(log, f)


# ---------------------------------------------------------------- orchestrator

def _start(args, out: str, n: int, maddr: str, swarm_id: str, arm: str, *, spams: str = "",
           spammer: str = "") -> subprocess.Popen:
    gossip, _, ban_s = ARMS[arm]
    cmd = [sys.executable, "-m", "bench.exchange.spam", "--worker", "--peers", str(n), "--initial-peer", maddr,
           "--swarm-id", swarm_id, "--ban-s", str(ban_s), "--out", out, "--duration", str(args.duration),
           "--period", str(args.period), "--factor", str(args.factor), "--spam-after", str(args.spam_after),
           "--fresh-addrs", args.fresh_addrs] + (["--judge"] if args.judge else [])
    cmd += ["--gossip"] if gossip else []
    return subprocess.Popen(cmd + (["--spam", spams] if spams else []) + (["--spammer", spammer] if spammer else []),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def run_arm(arm: str, args) -> dict:
    from swarm.dht.bootstrap import start_bootstrap

    gossip, spams, ban_s = ARMS[arm]
    swarm_id = f"spam-{arm.replace('+', '-')}-{int(time.time())}"
    boot, maddrs = start_bootstrap(startup_timeout_s=180, swarm_id=swarm_id, gossip=gossip)
    tmp = tempfile.mkdtemp(prefix="spam-")
    outs = [os.path.join(tmp, "extra.json"), os.path.join(tmp, "honest.json")]
    procs = []
    try:
        procs.append(_start(args, outs[0], 1, maddrs[0], swarm_id, arm, spams=spams))
        extra = json.loads(procs[0].stdout.readline() or "null")
        procs.append(_start(args, outs[1], args.peers - 1, maddrs[0], swarm_id, arm, spammer=extra["ready"][0]))
        if json.loads(procs[1].stdout.readline() or "null") is None:
            raise RuntimeError("the honest worker failed to start its peers")
        t0 = time.monotonic() + args.warmup
        for p in procs:
            p.stdin.write(f"{t0}\n")
            p.stdin.flush()
        for p in procs:
            p.wait(timeout=args.duration + args.warmup + 300)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        boot.shutdown()
    extra_log, honest_log = (json.loads(Path(o).read_text()) for o in outs)
    return {**summarise(arm, extra_log, honest_log, ban_s, extra["ready"][0], args), "gossip": gossip}


def summarise(arm: str, extra_log: dict, honest_log: dict, ban_s: float, spammer: str, args) -> dict:
    bundle_bytes: dict[str, int] = {}
    spammed = 0  # bundle bytes of the rounds that start once the spammer runs (--spam-after)
    for peer, r, nbytes, *_ in honest_log["rounds"]:
        bundle_bytes[peer] = bundle_bytes.get(peer, 0) + nbytes
        spammed += nbytes if r * args.period >= args.spam_after else 0
    rows = []
    for peer, s in honest_log["peers"].items():
        a, b = s["before"], s["after"]
        wall = b["t"] - a["t"]
        connected = honest_log["connected"].get(peer, [])
        rows.append({"peer": peer[:12], "gossip_msgs_per_s": (b["received"] - a["received"]) / wall,
                     "gossip_kib_per_s": (b["received_bytes"] - a["received_bytes"]) / 1024 / wall,
                     "p2pd_kib_per_s": (b["io"] - a["io"]) / 1024 / wall,
                     "bundle_kib_per_s": bundle_bytes.get(peer, 0) / 1024 / wall,
                     "banned": b["banned"] - a["banned"],
                     "spammer_connected": sum(connected) / len(connected) if connected else None,
                     "spammer_banned_at_end": spammer in honest_log["guard"].get(peer, [])})
    x = extra_log["peers"][spammer]
    extra_wall = x["after"]["t"] - x["before"]["t"]
    return {"arm": arm, "gossip_ban_s": ban_s, "honest_peers": len(rows),
            **{m: statistics.fmean(r[m] for r in rows) for m in METRICS},
            "bundle_kib_per_s_spammed": spammed / 1024 / len(rows) / (args.duration - args.spam_after),
            "spammer_connected": _mean([r["spammer_connected"] for r in rows]),
            "bans": sum(r["banned"] for r in rows),
            "banned_at_end": sum(r["spammer_banned_at_end"] for r in rows),
            "drops": honest_log["drops"],
            "extra_peer": {"spam": extra_log.get("spam"),
                           "p2pd_kib_per_s": (x["after"]["io"] - x["before"]["io"]) / 1024 / extra_wall},
            "per_peer": rows}


def _mean(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arms", nargs="*", default=["none", "spam", "spam+guard"], choices=list(ARMS))
    ap.add_argument("--peers", type=int, default=8, help="gossip peers, the extra one included")
    ap.add_argument("--duration", type=float, default=90.0, help="measured seconds per arm")
    ap.add_argument("--warmup", type=float, default=15.0, help="seconds after every peer started, before measuring")
    ap.add_argument("--period", type=float, default=10.0, help="seconds between an honest peer's publishes")
    ap.add_argument("--factor", type=int, default=100, help="the spammer's rate over an honest peer's")
    ap.add_argument("--spam-after", type=float, default=0.0,
                    help="seconds into the measured time before the spammer starts (honest peers earn standing first)")
    ap.add_argument("--fresh-addrs", default="own", choices=["own", "none"],
                    help="the addresses the fresh identities' announcements name: the extra peer's, or none")
    ap.add_argument("--judge", action="store_true",
                    help="peers count every record they take as used, so their senders earn good standing")
    ap.add_argument("--out", default="spam")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--initial-peer", help=argparse.SUPPRESS)
    ap.add_argument("--swarm-id", help=argparse.SUPPRESS)
    ap.add_argument("--ban-s", type=float, default=0.0, help=argparse.SUPPRESS)
    ap.add_argument("--spam", default="", choices=["", "loud", "fresh"], help=argparse.SUPPRESS)
    ap.add_argument("--gossip", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--spammer", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args)
        return
    rows = []
    for arm in args.arms:
        print(f"{arm}: {args.peers} gossip peers, {args.duration:g} s measured …", flush=True)
        rows.append(run_arm(arm, args))
    base = next((r for r in rows if r["arm"] == "none"), None)
    for r in rows:
        r["ratio_to_none"] = {m: r[m] / base[m] for m in METRICS if base and base[m]} if base else {}
    print(table([{**r, **{f"{m}_ratio": r["ratio_to_none"].get(m) for m in METRICS}} for r in rows],
                ["arm", *METRICS, "bundle_kib_per_s_spammed", "p2pd_kib_per_s_ratio", "spammer_connected", "bans"]))
    for r in rows:
        print(f"{r['arm']}: drops {r['drops']}, extra peer {r['extra_peer']}")
    print(f"wrote {write_json(args.out, {'args': vars(args), 'arms': rows}, RESULTS)}")


if __name__ == "__main__":
    main()
