"""What a hostile peer sends to exhaust a node: the attacks of the hostile tests (tests/adversarial/test_exhaustion.py)
and of the soak's attacker roles (bench/reliability/soak/roles.py), each over a real HivemindTransport of the attacker's.

    bomb_bundle       a few KB of zstd whose records decode to ~2^21 equal tokens (an honest record first)
    bloat_record      an honest-looking record whose model name is millions of characters long
    publish_raw       serve any bytes as our bundle, store its announcement and push it (notify) to peers
    offer             push one bundle with its bytes to one peer (docs/PROTOCOL.md §6.3), as a client-mode peer would
    slow_offer        push an offer, then, once it is accepted, send its bytes one byte a second
    dial_trap_addrs   the announcement `addrs` that point every receiver at a TCP port of our choosing
    flood_unsigned    store thousands of unsigned entries under a swarm's announcement keys
    Ghosts            many throwaway identities behind one DHT peer, announcing bundles nobody serves
    refetch           fetch a publisher's bundle again and again, many streams at once
    uvarint, publish_rpc  the varint and the framed gossipsub RPC that a spammer or a replayer writes on /meshsub

Nothing here is used by a node; it is the other side of the node's bounds (docs/ARCHITECTURE.md §4).
"""

from __future__ import annotations

import asyncio
import time

import msgpack
import numpy as np
import zstandard

from protocols.announce import encode_announcement
from protocols.codec import encode_bundle, record_to_wire, sha256_hex
from protocols.keys import rollouts_key, window_of
from protocols.records import SCHEMA_VERSION, Announcement, RolloutRecord
from swarm.net import wire
from swarm.net.dial import open_stream

BOMB_TOKENS = 8192  # per completion: the wire cap
BOMB_COMPLETIONS = 63  # per record: 4 such records and an honest one stay within the bundle token cap (2^21)


def bomb_bundle(honest: RolloutRecord, records: int = 4) -> tuple[bytes, int]:
    """(bundle bytes, record count): `honest` re-sent, then `records` records of BOMB_COMPLETIONS completions of
    BOMB_TOKENS equal tokens each (~2^21 tokens for 4 records: every wire cap respected, ~6 KB on the wire)."""
    head = record_to_wire(honest)
    ids = np.full(BOMB_TOKENS, 5, dtype="<u2" if honest.model.vocab_size <= 65536 else "<u4").tobytes()
    lps = np.full(BOMB_TOKENS, -0.5, dtype="<f2").tobytes()
    bomb = dict(head, completions=[{"text": "5" * 64, "token_ids": ids, "logprobs": lps, "finish_reason": "length",
                                    "reward_claimed": 1.0}] * BOMB_COMPLETIONS)
    body = msgpack.packb({"v": SCHEMA_VERSION, "records": [head] + [bomb] * records}, use_bin_type=True)
    return zstandard.ZstdCompressor(level=10).compress(body), 1 + records


def bloat_record(honest: RolloutRecord, chars: int = 4 << 20) -> RolloutRecord:
    """`honest` with a model name of `chars` characters (a display string a receiver copies into its metrics)."""
    from dataclasses import replace
    return replace(honest, model=replace(honest.model, name="N" * chars))


def announcement(t, data: bytes, count: int, *, addrs: str | None = None, now: float | None = None) -> Announcement:
    now = time.time() if now is None else now
    return Announcement(peer=t.peer_id, window=window_of(now, t.cfg.window_s), count=count, nbytes=len(data),
                        sha256=sha256_hex(data), policy_version=0, created_at=now,
                        addrs=t.addrs if addrs is None else addrs)


def publish_raw(t, data: bytes, count: int, *, addrs: str | None = None) -> Announcement:
    """Serve `data` as our bundle of `count` records, store its announcement (naming `addrs`, ours by default) in
    the DHT and push it to the peers we know, as `HivemindTransport.publish` does for honest records."""
    ann = announcement(t, data, count, addrs=addrs)
    t._serve(ann, data)
    t.run_on_loop(t._announce(ann, encode_announcement(ann)), t.cfg.dht_timeout_s + 5)
    return ann


def publish_records(t, records: list[RolloutRecord], *, addrs: str | None = None) -> Announcement:
    return publish_raw(t, encode_bundle(records), len(records), addrs=addrs)


async def offer(t, peer: str, peer_addrs: list[str], data: bytes, count: int, *, timeout_s: float = 10.0) -> str:
    """Push one bundle with its bytes to `peer` (no addresses named: as a client-mode peer does); its answer."""
    value = encode_announcement(announcement(t, data, count, addrs=""))
    writer = None
    try:
        reader, writer = await asyncio.wait_for(open_stream(t.p2p, peer, wire.PUSH_NAME, peer_addrs), timeout_s)
        return await asyncio.wait_for(wire.push_bundle(reader, writer, value, data), timeout_s)
    except Exception as exc:  # refused, reset: the answer is what we measure
        return f"failed: {type(exc).__name__}"
    finally:
        if writer is not None:
            writer.close()


async def slow_offer(t, peer: str, peer_addrs: list[str], data: bytes, count: int, hold_s: float) -> str:
    """Offer a bundle; once accepted, send its first frame one byte a second for `hold_s`: a download slot held
    by bytes that never complete. The receiver's answer ("ok", "declined", or why the stream failed)."""
    value = encode_announcement(announcement(t, data, count, addrs=""))
    writer = None
    try:
        reader, writer = await asyncio.wait_for(open_stream(t.p2p, peer, wire.PUSH_NAME, peer_addrs), 10)
        await wire.write_frame(writer, value)
        status, _, _ = wire.decode_header(await asyncio.wait_for(wire.read_frame(reader, wire.MAX_CONTROL), hold_s))
        if status == "ok":
            writer.write(len(data).to_bytes(4, "big"))
            deadline = time.monotonic() + hold_s
            for b in data:
                if time.monotonic() > deadline:
                    break
                writer.write(bytes([b]))
                await writer.drain()
                await asyncio.sleep(1.0)
        return status
    except Exception as exc:
        return f"failed: {type(exc).__name__}"
    finally:
        if writer is not None:
            writer.close()


def dial_trap_addrs(port: int, host: str = "127.0.0.1") -> str:
    """An `addrs` dial hint naming a TCP port of the attacker's choosing (here, a listener that counts connections)."""
    return f"/ip4/{host}/tcp/{port}"


async def _store_unsigned(_dht, node, keys: list[str], per_key: int, expiration: float) -> int:
    """Runs inside the flooder's DHT process: `per_key` unsigned subkeys under each key, in batches."""
    stored = 0
    for key in keys:
        for start in range(0, per_key, 250):
            n = min(250, per_key - start)
            ok = await node.store_many([key] * n, [b"x" * 64] * n, expiration,
                                       subkeys=[f"junk-{start + i}".encode() for i in range(n)])
            stored += sum(bool(v) for v in ok.values())
    return stored


def flood_unsigned(dht, swarm_id: str, *, windows: list[int], shards: int, per_key: int = 1000,
                   ttl_s: float = 600.0) -> int:
    """Store `per_key` unsigned entries under each shard of each window (from a DHT peer with no validator of ours:
    honest peers refuse them, a DHT peer of our own keeps them). Returns the stores any peer accepted."""
    from functools import partial
    keys = [rollouts_key(swarm_id, w, s) for w in windows for s in range(shards)]
    return dht.run_coroutine(partial(_store_unsigned, keys=keys, per_key=per_key,
                                     expiration=time.time() + ttl_s))


async def refetch(t, publisher: str, addrs: list[str], sha256: str, times: int, swarm_id: str,
                  policy=None) -> list[str]:
    """Fetch `publisher`'s bundle `sha256` `times` times, all at once (dialling `addrs` as `policy` allows, e.g.
    the attacker's own swarm.net.dial.DialPolicy); what each attempt got ("ok" or why not)."""
    async def one() -> str:
        writer = None
        try:
            reader, writer = await asyncio.wait_for(open_stream(t.p2p, publisher, wire.HANDLER_NAME, addrs, policy), 10)
            await wire.write_frame(writer, wire.encode_request(swarm_id, sha256))
            status, nbytes, _ = wire.decode_header(await asyncio.wait_for(
                wire.read_frame(reader, wire.MAX_CONTROL), 10))
            if status == "ok":
                await asyncio.wait_for(wire.read_data(reader, sha256=sha256, nbytes=nbytes), 30)
            return status
        except Exception as exc:
            return f"failed: {type(exc).__name__}"
        finally:
            if writer is not None:
                writer.close()
    return list(await asyncio.gather(*(one() for _ in range(times))))


_GHOSTS: dict = {}  # set before the ghosts' DHT process forks: it builds and signs their announcements itself


async def _store_ghosts(_dht, node, swarm_id: str, window: int, now: float, shards: int) -> int:
    """Runs inside the ghosts' DHT process: one announcement per identity, signed by it, nobody serving it."""
    import random

    from protocols.keys import shard_of
    rng = random.Random(window)
    keys, values = [], []
    for pid in _GHOSTS["ids"]:
        ann = Announcement(peer=pid, window=window, count=1, nbytes=1000, sha256=f"{rng.getrandbits(256):064x}",
                           policy_version=0, created_at=now, addrs=_GHOSTS["addrs"])
        keys.append(rollouts_key(swarm_id, window, shard_of(pid, shards)))
        values.append(encode_announcement(ann))
    done = await node.store_many(keys, values, expiration_time=now + 600, subkeys=_GHOSTS["subkeys"])
    return sum(bool(v) for v in done.values())


class Ghosts:
    """`n` throwaway identities behind one DHT peer: announcements that name `addrs` and that nobody serves; with
    `near`, identities in that peer's shard (of `shards`) only: a crowd in one shard."""

    def __init__(self, n: int, initial_peer: str, addrs: str, near: str | None = None, shards: int = 4):
        from hivemind import DHT

        from bench.harness.identities import cached_keys, many_keys_validator
        from protocols.keys import shard_of
        from swarm.net.identity import owner_subkey, peer_id_of_key
        if near is None:
            keys = cached_keys(n)
        else:  # about shards × n keys hold n in one shard: draw more until they do (new keys are cached)
            pool = shards * n + 64
            while len(keys := [k for k in cached_keys(pool) if shard_of(peer_id_of_key(k), shards) ==
                               shard_of(near, shards)][:n]) < n:
                pool += n
        _GHOSTS.update(ids=[peer_id_of_key(k) for k in keys], subkeys=[owner_subkey(k) for k in keys], addrs=addrs)
        self.ids = list(_GHOSTS["ids"])
        self.dht = DHT(initial_peers=[initial_peer], start=True, client_mode=True, startup_timeout=120,
                       host_maddrs=["/ip4/127.0.0.1/tcp/0"], record_validators=[many_keys_validator(keys)])

    def announce(self, swarm_id: str, shards: int, window_s: float = 10.0) -> int:
        from functools import partial
        now = time.time()
        return self.dht.run_coroutine(partial(_store_ghosts, swarm_id=swarm_id, window=window_of(now, window_s),
                                              now=now, shards=shards))

    def shutdown(self) -> None:
        self.dht.shutdown()


def uvarint(n: int) -> bytes:
    """n as an unsigned LEB128 varint (protobuf's and multiformats' length prefix)."""
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def publish_rpc(messages: list[bytes]) -> bytes:
    """One varint-framed gossipsub RPC publishing the serialized messages (RPC field 2, `publish`), as a peer writes
    it on a /meshsub stream."""
    body = b"".join(b"\x12" + uvarint(len(m)) + m for m in messages)
    return uvarint(len(body)) + body

