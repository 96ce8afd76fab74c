"""Made-up rollout records, one factory for benches and tests alike (every field a keyword, a default for each).

    record      a RolloutRecord of `peer` for task `dataset` #index: its completions given, or one `completion()`
    completion  a Completion of `tokens` token ids counted up from `first`, each with logprob `logprob`
    FP, T0      the tokenizer fingerprint and the creation time (unix s) a record has unless told otherwise

What a record says of itself is a claim to the receiver (docs/PROTOCOL.md §8): these records carry no real task
answer and no real model's logprobs, only what the transport and the receive rules look at. Records that must
verify against a real task stream are `tests.adversarial.hostile.honest_record`'s (from a node's own tasks).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from protocols.records import Completion, ModelInfo, RolloutRecord, SamplingInfo, TaskRef

FP = "cd" * 32
T0 = 1_700_000_000.0


def completion(text: str = "<answer>5</answer>", tokens: int = 3, *, first: int = 1, ids: Iterable[int] | None = None,
               logprob: float = -0.5, logprobs: Sequence[float] | None = None, finish: str = "stop",
               reward: float | None = 1.0) -> Completion:
    """`tokens` ids first, first + 1, … (or `ids`), each with `logprob` (or `logprobs`, one per id)."""
    ids = tuple(range(first, first + tokens)) if ids is None else tuple(ids)
    lps = (logprob,) * len(ids) if logprobs is None else tuple(logprobs)
    return Completion(text, ids, lps, finish, reward)


def record(peer: str, index: int = 0, *, round_: int = 0, completions: Iterable[Completion] | None = None,
           swarm: str = "rlswarm", model: str = "tiny-qwen2", fingerprint: str = FP, vocab: int = 512,
           created_at: float = T0, dataset: str = "chain_sum", params: dict | None = None, seed: int = 0,
           prompt: str | None = None, sampling: tuple[float, float, int] = (1.0, 1.0, 8),
           policy_version: int | None = None) -> RolloutRecord:
    """One group of `peer` (round `round_`, policy version `round_` unless given), prompt "Q<index>" unless given."""
    return RolloutRecord(
        swarm=swarm, peer=peer, round=round_, policy_version=round_ if policy_version is None else policy_version,
        created_at=created_at, model=ModelInfo(model, fingerprint, vocab), sampling=SamplingInfo(*sampling),
        task=TaskRef(dataset, {} if params is None else dict(params), seed, index),
        prompt=f"Q{index}" if prompt is None else prompt,
        completions=(completion(),) if completions is None else tuple(completions))
