"""Finding 3, the parts past ingest's budget: what a small bundle can make a node allocate while
decoding, and what one long group costs a training step.

Before: 5.6 KB of zstd (64 MiB of two-character strings in nested arrays) cost 4.4 s and 1.5 GB
to decode before the records were refused; an 8 KB bundle of 256 × 64 × 1000 equal tokens,
within every per-field cap, decoded to 1.1 GB of Python tuples; and micro-batches packed groups
in arrival order, so one long group padded every row it shared a forward pass with.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from node.round.logprobs import TokenRow
from node.round.train import Row, micro_batches

ROOT = Path(__file__).resolve().parents[2]

_DECODE = r"""
import json, sys, time
import zstandard
from tests import peak_rss
from protocols.codec import RecordError, decode_bundle, encode_bundle
from protocols.records import Completion, ModelInfo, RolloutRecord, SamplingInfo, TaskRef

def nested(item: bytes) -> bytes:  # {"v": 1, "records": [[[item × 1024] × 1024] × n]}, n to fill 64 MiB
    inner = b"\xdc\x04\x00" + item * 1024
    rec = b"\xdc\x04\x00" + inner * 1024
    n = ((64 << 20) - 64) // len(rec)
    return zstandard.ZstdCompressor(level=19).compress(
        b"\x82\xa1v\x01\xa7records\xdc" + n.to_bytes(2, "big") + rec * n)

def tokens(n_rec, n_comp, n_tok):
    comp = Completion("x", tuple(range(1000, 1000 + n_tok)), (-0.5,) * n_tok, "length")
    rec = RolloutRecord("rlswarm", "p", 0, 0, 0.0, ModelInfo("m", "a" * 64, 50000), SamplingInfo(1.0, 1.0, n_tok),
                        TaskRef("chain_sum", {}, 0, 0), "p", (comp,) * n_comp)
    return encode_bundle([rec] * n_rec)

data = {"strings": lambda: nested(b"\xa2ab"), "nils": lambda: nested(b"\xc0"),
        "tokens": lambda: tokens(256, 64, 1000)}[sys.argv[1]]()
base = peak_rss.mark()
t = time.perf_counter()
try:
    records, drops = decode_bundle(data)
    out = "accepted %d records" % len(records)
except RecordError as exc:
    out = exc.reason
print(json.dumps({"bytes": len(data), "seconds": time.perf_counter() - t, "outcome": out,
                  "peak_mb": (peak_rss.peak() - base) / 2**20}))
"""


def _decode_cost(case: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", _DECODE, case], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_few_kilobytes_cannot_become_a_gigabyte_of_objects():
    for case in ("strings", "nils"):
        cost = _decode_cost(case)
        assert cost["bytes"] < 8000 and cost["outcome"] == "too_large", cost
        # the 64 MiB decompressed payload itself is allowed; the objects it describes are not
        # (memory is the robust signal on a shared machine; the time bound only catches a stall)
        assert cost["peak_mb"] < 160 and cost["seconds"] < 10.0, cost


def test_a_bundle_cannot_unpack_millions_of_tokens():
    cost = _decode_cost("tokens")
    assert cost["bytes"] < 10_000 and cost["outcome"] == "too_large", cost
    assert cost["peak_mb"] < 400, cost


def _group(gid: int, length: int, n: int = 4) -> list[Row]:
    return [Row(TokenRow([1] * 8, [2] * (length - 8)), [-0.1] * (length - 8), -1.0, True, 1.0, gid, True)
            for _ in range(n)]


def _padded_cells(batches: list[list[Row]]) -> int:
    return sum(len(b) * max(len(r.tokens.prompt_ids) + len(r.tokens.completion_ids) for r in b) for b in batches)


def test_one_long_group_pads_only_itself():
    rows = _group(0, 20) + _group(1, 1032) + _group(2, 24) + _group(3, 18) + _group(4, 30)
    batches = micro_batches(rows, 8)
    assert sorted(r.group_id for b in batches for r in b) == sorted(r.group_id for r in rows)
    for b in batches:  # whole groups, and lengths within a factor of two in one pass
        lengths = [len(r.tokens.prompt_ids) + len(r.tokens.completion_ids) for r in b]
        assert max(lengths) <= 2 * min(lengths)
        assert all(sum(r.group_id == g for r in b) == 4 for g in {r.group_id for r in b})
    real = sum(len(r.tokens.prompt_ids) + len(r.tokens.completion_ids) for r in rows)
    assert _padded_cells(batches) < 1.2 * real  # arrival order: 2.0 × (the long group padded 4 short rows)
    assert [len(b) for b in micro_batches(_group(0, 20) + _group(1, 21) + _group(2, 22), 8)] == [8, 4]
