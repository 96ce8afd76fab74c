"""Bytes on the wire per generated token, for real rollouts of built-in models (target: ≤ 4 B/token).

For each model: a solo node samples B chain_sum prompts × G completions with its HF generator,
verifies them and turns them into wire records (node.round.records.to_records) exactly as a round does;
the round's records are encoded as one bundle (protocols.codec.encode_bundle) with float16 and
float32 logprobs. Printed side by side:

  bundle B/token     compressed bundle bytes / generated tokens (text + ids + logprobs + prompt
                     + per-record metadata: everything a peer downloads)
  vs 4 B target      the project target: ≤ 4 B/token, text included
  vs F-TIS 8 B       F-TIS ships ids (u32) + logprobs (f32) = 8 B/token with no text
  parts              each payload compressed alone (zstd, same level): text, ids, logprobs,
                     prompts, to show where the bytes go
  zstd levels        the same bundle at levels 3 / 10 (shipped) / 19, with encode/decode times

    python -m bench.exchange.wire_bytes [--models lab-chain-sum smollm2-135m] [--prompts 4] [--group-size 4]
                                 [--max-new-tokens 64]

A model that is not in the built-in cache is skipped with a note (build it with
`swarm models fetch <alias>`); the run never downloads or builds anything.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import zstandard

from bench.harness.models import (
    CHAIN_SUM,
    cached_models,
    set_threads,
    system_prompt_for,
)
from bench.harness.output import results_dir, table, write_json
from protocols import codec
from protocols.codec import decode_bundle, encode_bundle

RESULTS = results_dir("exchange")

TARGET_B_PER_TOKEN = 4.0  # the project target, text included
FTIS_B_PER_TOKEN = 8.0  # F-TIS: u32 ids + f32 logprobs, no text


def rollout_records(spec: str, prompts: int, group: int, max_new_tokens: int, seed: int):
    """One round's records from a solo node: (records, generated tokens, generation seconds)."""
    from node.config import parse_config
    from node.node import Node
    from node.round.groups import verify_group
    from node.round.records import to_records

    cfg = parse_config({
        "name": "wire-bench", "seed": seed, "model": {"spec": spec},
        "tasks": {"datasets": [{"name": "chain_sum", "config": CHAIN_SUM}],
                  "system_prompt": system_prompt_for(spec), "eval_size": 0},
        "generation": {"prompts_per_round": prompts, "group_size": group, "max_new_tokens": max_new_tokens},
        "eval": {"every": 0},
    })
    with tempfile.TemporaryDirectory() as out:
        node = Node(cfg, Path(out))
        tasks = node.tasks.sample(0, prompts)
        texts = [node.prompt_of(t) for t in tasks]
        torch.manual_seed(seed)
        gen = node.generator.generate(texts, n=group)
        groups = [verify_group(node.tasks, t, comps, round=0, policy_version=0) for t, comps in zip(tasks, gen.groups)]
        return to_records(node, 0, groups, texts), gen.new_tokens, gen.seconds


def _z(data: bytes, level: int) -> int:
    return len(zstandard.ZstdCompressor(level=level).compress(data))


def parts(records, level: int) -> dict[str, float]:
    """Compressed bytes of each payload alone: where the bundle's bytes come from."""
    comps = [c for r in records for c in r.completions]
    vocab = records[0].model.vocab_size
    ids = b"".join(np.asarray(c.token_ids, "<u2" if vocab <= 65536 else "<u4").tobytes() for c in comps)
    return {
        "text": _z("".join(c.text for c in comps).encode(), level),
        "ids": _z(ids, level),
        "logprobs_f16": _z(b"".join(np.asarray(c.logprobs, "<f2").tobytes() for c in comps), level),
        "logprobs_f32": _z(b"".join(np.asarray(c.logprobs, "<f4").tobytes() for c in comps), level),
        "prompts": _z("".join(r.prompt for r in records).encode(), level),
    }


def measure(records, tokens: int, levels: list[int], repeats: int) -> list[dict]:
    rows = []
    shipped = codec.ZSTD_LEVEL
    try:
        for level in levels:
            codec.ZSTD_LEVEL = level
            for dtype in ("f16", "f32"):
                t0 = time.perf_counter()
                for _ in range(repeats):
                    data = encode_bundle(records, logprob_dtype=dtype)
                t1 = time.perf_counter()
                for _ in range(repeats):
                    decoded, drops = decode_bundle(data)
                t2 = time.perf_counter()
                assert len(decoded) == len(records) and not drops, f"bundle failed to round-trip: {drops}"
                rows.append({"level": level, "logprobs": dtype, "bytes": len(data), "B/token": len(data) / tokens,
                             "vs_4B": len(data) / tokens / TARGET_B_PER_TOKEN,
                             "vs_FTIS_8B": len(data) / tokens / FTIS_B_PER_TOKEN,
                             "encode_ms": (t1 - t0) / repeats * 1e3, "decode_ms": (t2 - t1) / repeats * 1e3,
                             "shipped": level == shipped})
    finally:
        codec.ZSTD_LEVEL = shipped
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["lab-chain-sum", "smollm2-135m"])
    ap.add_argument("--prompts", type=int, default=4, help="B prompts (records in the bundle)")
    ap.add_argument("--group-size", type=int, default=4, help="G completions per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--levels", type=int, nargs="+", default=[3, codec.ZSTD_LEVEL, 19])
    ap.add_argument("--repeats", type=int, default=5, help="encode/decode repetitions for the timings")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tag", default="", help="suffix of the results file: wire_bytes<tag>.json")
    args = ap.parse_args()
    set_threads(args.threads)

    (specs, skipped), results = cached_models(args.models), {}
    for spec in specs:
        records, tokens, gen_s = rollout_records(spec, args.prompts, args.group_size, args.max_new_tokens, args.seed)
        rows = measure(records, tokens, args.levels, args.repeats)
        p = parts(records, codec.ZSTD_LEVEL)
        per_tok = {k: v / tokens for k, v in p.items()}
        chars = sum(len(c.text) for r in records for c in r.completions)
        results[spec] = {"tokens": tokens, "records": len(records), "completions": len(records) * args.group_size,
                         "text_chars_per_token": chars / tokens, "vocab_size": records[0].model.vocab_size,
                         "generation_s": gen_s, "bundles": rows, "parts_B_per_token": per_tok}
        print(f"\n== {spec}: {len(records)} records × {args.group_size} completions, {tokens} generated tokens, "
              f"{chars / tokens:.2f} text chars/token, vocab {records[0].model.vocab_size}")
        print(table(rows, ["level", "logprobs", "bytes", "B/token", "vs_4B", "vs_FTIS_8B", "encode_ms",
                           "decode_ms", "shipped"]))
        print("parts alone (B/token): " + ", ".join(f"{k} {v:.2f}" for k, v in per_tok.items()))

    summary = [{"model": s, "B/token f16": next(r["B/token"] for r in v["bundles"] if r["shipped"] and r["logprobs"] == "f16"),
                "B/token f32": next(r["B/token"] for r in v["bundles"] if r["shipped"] and r["logprobs"] == "f32")}
               for s, v in results.items()]
    for row in summary:
        row["f16 vs 4B target"] = row["B/token f16"] / TARGET_B_PER_TOKEN
        row["f16 vs F-TIS 8B"] = row["B/token f16"] / FTIS_B_PER_TOKEN
    if summary:
        print("\n" + table(summary, list(summary[0])))
    path = write_json(f"wire_bytes{args.tag}", {"args": vars(args), "target_B_per_token": TARGET_B_PER_TOKEN,
                                     "ftis_B_per_token": FTIS_B_PER_TOKEN, "models": results,
                                     "summary": summary, "skipped": skipped}, RESULTS)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
