"""A third-party client written from docs/PROTOCOL.md alone interoperates with HivemindTransport.

`ThirdPartyClient` below uses only hivemind, msgpack, zstandard and the standard library — no
import from protocols/ or swarm/. The test harness (bottom) starts a real HivemindTransport and
compares what crosses the wire in both directions.
"""

from __future__ import annotations

import asyncio
import hashlib
import struct
import time
from pathlib import Path

import msgpack
import pytest
import zstandard
from hivemind import DHT
from hivemind.dht.crypto import RSASignatureValidator
from hivemind.p2p import PeerID
from hivemind.proto import crypto_pb2
from hivemind.utils import get_dht_time
from hivemind.utils.crypto import RSAPrivateKey

pytestmark = pytest.mark.integration

# ---------------------------------------------------------------- the third-party client (PROTOCOL.md only)

PROTOCOL_ID = "/rlswarm/bundle/2"  # §6.1
MAX_CONTROL, MAX_CHUNK = 4096, 1 << 20  # §6.1 frame limits
WINDOW_S, SHARDS = 10.0, 4  # §1: the swarm's defaults


def window_of(t: float) -> int:  # §5
    return int(t // WINDOW_S)


def shard_of(peer_id: str) -> int:  # §5
    return int.from_bytes(hashlib.sha256(peer_id.encode()).digest()[:8], "big") % SHARDS


def key_of(swarm: str, window: int, shard: int) -> str:  # §5
    return f"{swarm}/rollouts/w{window}/s{shard}"


async def _read_frame(reader: asyncio.StreamReader, limit: int) -> bytes:
    n = int.from_bytes(await reader.readexactly(4), "big")
    if not 0 < n <= limit:  # §6: checked before reading the payload
        raise ValueError(f"frame of {n} bytes")
    return await reader.readexactly(n)


def _frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


class ThirdPartyClient:
    """One swarm peer: its own RSA key as libp2p identity and DHT signer (§4, §5)."""

    def __init__(self, initial_peers: list[str], workdir: Path, swarm: str = "rlswarm"):
        self.swarm = swarm
        self.key = RSAPrivateKey()
        identity = workdir / "client.key"  # §4: libp2p PrivateKey protobuf holding the PKCS#1 DER key
        identity.write_bytes(crypto_pb2.PrivateKey(key_type=crypto_pb2.KeyType.RSA,
                                                   data=self.key.to_bytes()).SerializeToString())
        self.validator = RSASignatureValidator(self.key)
        self.dht = DHT(start=True, initial_peers=initial_peers, identity_path=str(identity),
                       record_validators=[self.validator], startup_timeout=60, check_if_identity_free=False)
        self.peer_id = self.dht.peer_id.to_base58()
        self.served: dict[str, bytes] = {}

    def announcements(self) -> list[dict]:
        """§5: every signed announcement of the current and the previous window, all shards."""
        now, out = window_of(time.time()), []
        for window in (now, now - 1):
            for shard in range(SHARDS):
                found = self.dht.get(key_of(self.swarm, window, shard), latest=True)
                if found is not None:
                    out += [msgpack.unpackb(item.value, raw=False) for subkey, item in found.value.items()
                            if isinstance(subkey, bytes) and subkey.startswith(b"[owner:")]
        return out

    async def fetch(self, ann: dict) -> bytes:
        """§6: request, header, data frames; size and digest checked."""
        p2p = await self.dht.replicate_p2p()
        _, reader, writer = await p2p.call_binary_stream_handler(PeerID.from_base58(ann["peer"]), PROTOCOL_ID)
        try:
            writer.write(_frame(msgpack.packb({"v": 2, "swarm": self.swarm, "sha256": ann["sha256"]})))
            await writer.drain()
            header = msgpack.unpackb(await _read_frame(reader, MAX_CONTROL), raw=False)
            assert header["status"] == "ok" and header["nbytes"] == ann["nbytes"]
            data = b""
            while len(data) < ann["nbytes"]:
                data += await _read_frame(reader, MAX_CHUNK)
            assert len(data) == ann["nbytes"] and hashlib.sha256(data).hexdigest() == ann["sha256"]
            return data
        finally:
            writer.close()

    @staticmethod
    def decode_bundle(data: bytes) -> list[dict]:
        """§3: one zstd frame around msgpack {"v": 2, "records": [...]}; §2 packed arrays unpacked."""
        with zstandard.ZstdDecompressor().stream_reader(data) as r:
            bundle = msgpack.unpackb(r.read(64 << 20), raw=False)
        assert bundle["v"] == 2
        records = bundle["records"]
        for rec in records:
            id_fmt = "H" if rec["model"]["vocab_size"] <= 65536 else "I"
            lp_fmt, lp_size = ("e", 2) if rec["lp"] == "f16" else ("f", 4)
            for c in rec["completions"]:
                n = len(c["token_ids"]) // struct.calcsize(id_fmt)
                c["token_ids"] = list(struct.unpack(f"<{n}{id_fmt}", c["token_ids"]))
                c["logprobs"] = list(struct.unpack(f"<{len(c['logprobs']) // lp_size}{lp_fmt}", c["logprobs"]))
        return records

    async def publish(self, records: list[dict]) -> None:
        """§3 bundle, §6.1 served over the stream protocol, §5 signed announcement under its window and shard."""
        data = zstandard.ZstdCompressor(level=3).compress(
            msgpack.packb({"v": 2, "records": records}, use_bin_type=True))
        sha = hashlib.sha256(data).hexdigest()
        self.served[sha] = data

        async def handle(_info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                req = msgpack.unpackb(await _read_frame(reader, MAX_CONTROL), raw=False)
                body = self.served.get(req["sha256"]) if req.get("swarm") == self.swarm else None
                if body is None:
                    writer.write(_frame(msgpack.packb({"v": 2, "status": "not_found", "nbytes": 0, "sha256": ""})))
                else:
                    writer.write(_frame(msgpack.packb({"v": 2, "status": "ok", "nbytes": len(body),
                                                       "sha256": req["sha256"]})))
                    for i in range(0, len(body), MAX_CHUNK):
                        writer.write(_frame(body[i:i + MAX_CHUNK]))
                await writer.drain()
            finally:
                writer.close()

        p2p = await self.dht.replicate_p2p()
        await p2p.add_binary_stream_handler(PROTOCOL_ID, handle)
        now = time.time()
        value = msgpack.packb({"peer": self.peer_id, "window": window_of(now), "count": len(records),
                               "nbytes": len(data), "sha256": sha, "policy_version": 0, "created_at": now, "v": 2})
        assert self.dht.store(key_of(self.swarm, window_of(now), shard_of(self.peer_id)), value,
                              get_dht_time() + 60, subkey=self.validator.local_public_key)


# ---------------------------------------------------------------- harness: a real HivemindTransport

from protocols.records import (  # noqa: E402
    Completion,
    ModelInfo,
    RolloutRecord,
    SamplingInfo,
    TaskRef,
)
from swarm.config import SwarmConfig  # noqa: E402
from swarm.exchange.hivemind import HivemindTransport  # noqa: E402

FP = "0f" * 32


@pytest.fixture(scope="module")
def node_and_client(tmp_path_factory):
    node = HivemindTransport(cfg=SwarmConfig(enabled=True, poll_interval_s=0.2, startup_timeout_s=60))
    client = None
    try:
        client = ThirdPartyClient(node.visible_maddrs(), tmp_path_factory.mktemp("client"))
        yield node, client
    finally:
        if client is not None:
            client.dht.shutdown()
        node.shutdown()


def test_client_reads_announcement_and_decodes_bundle(node_and_client):
    node, client = node_and_client
    rec = RolloutRecord(
        swarm="rlswarm", peer=node.peer_id, round=5, policy_version=3, created_at=1700000001.25,
        model=ModelInfo("tiny-qwen2", FP, 512), sampling=SamplingInfo(0.8, 0.95, 32),
        task=TaskRef("chain_sum", {"min_terms": 2}, 7, 11), prompt="What is 2+3?",
        completions=(Completion("<answer>5</answer>", (17, 250, 2), (-0.5, -0.125, -3.0), "stop", 1.0),))
    nbytes = node.publish([rec])
    node.flush()  # publish() serves the bundle at once and stores its announcement in the background
    [ann] = [a for a in client.announcements() if a["nbytes"] == nbytes]
    assert ann == {**ann, "peer": node.peer_id, "window": window_of(ann["created_at"]), "count": 1, "v": 2}
    [got] = ThirdPartyClient.decode_bundle(asyncio.run(client.fetch(ann)))
    assert got == {
        "v": 2, "swarm": "rlswarm", "peer": node.peer_id, "round": 5, "policy_version": 3,
        "created_at": 1700000001.25,
        "model": {"name": "tiny-qwen2", "tokenizer": FP, "vocab_size": 512},
        "sampling": {"temperature": 0.8, "top_p": 0.95, "max_new_tokens": 32},
        "task": {"dataset": "chain_sum", "config": {"min_terms": 2}, "seed": 7, "index": 11},
        "prompt": "What is 2+3?", "lp": "f16",
        # f16 holds -0.5, -0.125 and -3.0 exactly
        "completions": [{"text": "<answer>5</answer>", "token_ids": [17, 250, 2], "logprobs": [-0.5, -0.125, -3.0],
                         "finish_reason": "stop", "reward_claimed": 1.0}],
    }


def _take_first(node: HivemindTransport, timeout: float):
    """The node's first non-empty delivery (a node waits only once it has seen a peer: poll until then)."""
    deadline = time.monotonic() + timeout
    got = node.take()
    while not got.records and time.monotonic() < deadline:
        got = node.take(min_records=1, timeout=0.5)
    return got


def test_node_takes_what_the_client_publishes(node_and_client):
    node, client = node_and_client
    wire_record = {
        "v": 2, "swarm": "rlswarm", "peer": client.peer_id, "round": 6, "policy_version": 0,
        "created_at": 1700000002.5, "model": {"name": "other-model", "tokenizer": FP, "vocab_size": 70000},
        "sampling": {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 8},
        "task": {"dataset": "chain_sum", "config": {}, "seed": 1, "index": 0}, "prompt": "Sum 1 and 1.", "lp": "f32",
        # vocab 70000 > 65536 → uint32 ids; lp "f32" → float32 logprobs (0.1 is not exact in f32: compare the f32 value)
        "completions": [{"text": "2", "token_ids": struct.pack("<2I", 69999, 3), "logprobs": struct.pack("<2f", -0.1, 0.0),
                         "finish_reason": "length", "reward_claimed": None}],
    }

    async def publish_then_gather():
        await client.publish([wire_record])
        # the client's loop must keep running to serve the stream while the node takes
        return await asyncio.get_running_loop().run_in_executor(None, _take_first, node, 20.0)

    got = asyncio.run(publish_then_gather())
    assert got.drops == {} and got.peers == [client.peer_id]
    f32_tenth = struct.unpack("<f", struct.pack("<f", -0.1))[0]
    assert got.records == [RolloutRecord(
        swarm="rlswarm", peer=client.peer_id, round=6, policy_version=0, created_at=1700000002.5,
        model=ModelInfo("other-model", FP, 70000), sampling=SamplingInfo(1.0, 1.0, 8),
        task=TaskRef("chain_sum", {}, 1, 0), prompt="Sum 1 and 1.",
        completions=(Completion("2", (69999, 3), (f32_tenth, 0.0), "length", None),))]
