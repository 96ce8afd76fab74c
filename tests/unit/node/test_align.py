"""Byte alignment of two tokenizations (node/round/align.py) and the chunk ratio it feeds the losses."""

import math
import random
from bisect import bisect_left
from itertools import accumulate

import pytest
import torch
from torch.testing import assert_close

from losses import FISConfig, LossInputs, behaviour_view
from losses.fis import filter_statistic
from node.round.align import chunk_alignment, receiver_ids_and_ends, sender_token_bytes
from node.round.groups import Group
from node.round.train import build_rows, loss_inputs
from node.tasks.task import Task
from protocols.codec import RecordError, record_from_wire, record_to_wire
from protocols.records import Completion, ModelInfo, RolloutRecord, SamplingInfo, TaskRef

TEXTS = ["<answer>tenalp</answer>", "Héllo wörld — ünïcödé 数学 ok", "  spaced   out\nlines ", "", "7"]


@pytest.mark.parametrize("which", ["tiny_qwen", "tiny_llama"])
def test_token_bytes_add_up_for_canonical_and_other_tokenizations(which, request):
    tok = request.getfixturevalue(which).tokenizer
    rng = random.Random(0)
    for text in TEXTS:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        nb = sender_token_bytes(tok, text, [*ids, tok.eos_token_id])
        assert nb is not None and sum(nb) == len(text.encode()) and nb[-1] == 0  # EOS produces no bytes
        # a non-canonical sampling of the same text: random ids decoded, then measured by prefix decoding
        ids = [rng.randrange(tok.vocab_size) for _ in range(20)]
        decoded = tok.decode(ids, skip_special_tokens=True)
        nb = sender_token_bytes(tok, decoded, ids)
        assert nb is not None and len(nb) == len(ids) and sum(nb) == len(decoded.encode())


def test_chunks_are_tokens_when_both_tokenizations_agree_and_one_chunk_when_they_share_only_the_end():
    chunks, mu = chunk_alignment([1, 3, 6], (1, 2, 3), (-0.1, -0.2, -0.3))
    assert chunks == [0, 1, 2] and mu == pytest.approx([-0.1, -0.2, -0.3])
    chunks, mu = chunk_alignment([2, 4, 6], (1, 2, 3), (-0.1, -0.2, -0.3))
    assert chunks == [0, 0, 0] and mu == pytest.approx([-0.6])
    # "abc|de|f" against "ab|cde|f": the shared ends are 5 and 6; EOS (0 bytes) joins the last chunk
    chunks, mu = chunk_alignment([3, 5, 6, 6], (2, 3, 1, 0), (-1.0, -2.0, -3.0, -4.0))
    assert chunks == [0, 0, 1, 1] and mu == pytest.approx([-3.0, -7.0])
    assert chunk_alignment([3, 5], (2, 2), (-1.0, -1.0)) is None  # different byte totals


def _chunked_inputs(logp, mu_chunks, chunks, aligned_beh=None) -> LossInputs:
    B, T = len(logp), len(logp[0])
    lp = torch.tensor(logp)
    return LossInputs(
        logp=lp, logp_old=lp.clone(), logp_beh=torch.tensor(aligned_beh or [[0.0] * T] * B),
        logp_beh_seq=torch.tensor([sum(m) for m in mu_chunks]),
        beh_aligned=torch.tensor([aligned_beh is not None] * B), mask=torch.ones(B, T),
        advantages=torch.tensor([-1.0] * B), group_ids=torch.zeros(B, dtype=torch.long),
        is_external=torch.ones(B, dtype=torch.bool),
        beh_chunks=torch.tensor(chunks), logp_beh_chunks=torch.tensor([m + [0.0] * (T - len(m)) for m in mu_chunks]))


def test_one_token_chunks_give_exactly_the_aligned_ratio_and_filter_statistic():
    logp, mu = [[-0.5, -1.0, -2.0, -0.1]], [[-3.0, -0.2, -2.5, -0.1]]
    chunked = behaviour_view(_chunked_inputs(logp, mu, [[0, 1, 2, 3]]))
    aligned = behaviour_view(_chunked_inputs(logp, mu, [[-1] * 4], aligned_beh=mu))
    assert_close(chunked.log_ratio, aligned.log_ratio)
    for kind in ("paper", "authors-code"):
        gids = torch.zeros(1, dtype=torch.long)
        assert_close(filter_statistic(chunked, gids, kind), filter_statistic(aligned, gids, kind))


def test_the_filter_sees_a_chunk_the_sequence_ratio_averages_away():
    # 8 tokens at log π = −3; the receiver finds chunk 0 10 nats likelier than the sender did and
    # chunks 1–5 2 nats less likely each: the sequence ratio is exactly 1, the chunks are not
    logp = [[-3.0] * 8]
    mu = [[-13.0, -1.0, -1.0, -1.0, -1.0, -1.0, -6.0]]
    chunks = [[0, 1, 2, 3, 4, 5, 6, 6]]
    gids = torch.zeros(1, dtype=torch.long)
    view = behaviour_view(_chunked_inputs(logp, mu, chunks))
    seq = behaviour_view(_chunked_inputs(logp, mu, [[-1] * 8]))
    assert_close(seq.log_ratio, torch.zeros(1, 8))
    assert_close(view.log_ratio[0, :6], torch.tensor([10.0, -2, -2, -2, -2, -2]))
    d_chunks, d_seq = float(filter_statistic(view, gids, "paper")), float(filter_statistic(seq, gids, "paper"))
    phi = lambda x: math.exp(x) * x - math.exp(x) + 1  # noqa: E731
    assert d_seq == pytest.approx(0.0, abs=1e-6)
    assert d_chunks == pytest.approx(phi(10.0) + 5 * phi(-2.0), rel=1e-4) and d_chunks > FISConfig(name="f-tis").threshold


def test_each_token_of_a_chunk_carries_the_chunk_ratio_with_its_own_gradient():
    # chunk 0 = tokens 0, 1: log r = (−0.5 − 1.0) − (−1.0) = −0.5; chunk 1 = token 2: −2.0 − (−2.5) = 0.5
    lp = torch.tensor([[-0.5, -1.0, -2.0]], requires_grad=True)
    inputs = _chunked_inputs([[0.0] * 3], [[-1.0, -2.5]], [[0, 0, 1]])
    inputs.logp = lp
    view = behaviour_view(inputs)
    assert_close(view.log_ratio.detach(), torch.tensor([[-0.5, -0.5, 0.5]]))
    assert_close(view.unit_log_ratio, torch.tensor([[-0.5, -0.5, 0.5]]))
    assert_close(view.unit_len, torch.tensor([[2.0, 2.0, 1.0]]))
    view.log_ratio[0, 0].backward()
    assert_close(lp.grad, torch.tensor([[1.0, 0.0, 0.0]]))  # Σ over the chunk's tokens: ∇ log π(chunk)


def test_the_geometric_spread_gives_each_token_r_c_to_the_1_over_n_c():
    lp = torch.tensor([[-0.5, -1.0, -2.0]], requires_grad=True)
    inputs = _chunked_inputs([[0.0] * 3], [[-1.0, -2.5]], [[0, 0, 1]])
    inputs.logp, inputs.chunk_spread = lp, True
    view = behaviour_view(inputs)
    assert_close(view.log_ratio.detach(), torch.tensor([[-0.25, -0.25, 0.5]]))
    assert_close(view.unit_log_ratio, torch.tensor([[-0.5, -0.5, 0.5]]))  # the filter still sees log r_c
    view.log_ratio[0, 0].backward()
    assert_close(lp.grad, torch.tensor([[0.5, 0.5, 0.0]]))


def _record(completions) -> RolloutRecord:
    return RolloutRecord(swarm="s", peer="p", round=0, policy_version=0, created_at=1.0,
                         model=ModelInfo("m", "0" * 64, 300), sampling=SamplingInfo(1.0, 1.0, 8),
                         task=TaskRef("chain_sum", {}, 0, 0), prompt="q", completions=tuple(completions))


def test_token_bytes_cross_the_wire_and_bad_ones_are_dropped():
    good = Completion("aé", (1, 2, 3), (-0.5, -0.25, -0.125), "stop", 1.0, (1, 2, 0))  # exact in f16
    wire = record_to_wire(_record([good]))
    assert record_from_wire(wire).completions[0] == good
    assert record_from_wire(record_to_wire(_record([Completion("a", (1,), (-0.1,), "stop")]))).completions[0].token_bytes is None
    for bad in (b"\x01\x00\x02\x00", b"\x01\x00\x01\x00\x00\x00", "abc"):
        wire["completions"][0]["token_bytes"] = bad
        with pytest.raises(RecordError) as e:
            record_from_wire(wire)
        assert e.value.reason == "schema"
    with pytest.raises(ValueError):
        record_to_wire(_record([Completion("aé", (1, 2, 3), (-0.1, -0.2, -0.3), "stop", 1.0, (1, 1, 0))]))


def test_build_rows_aligns_a_peer_of_another_tokenizer(tiny_qwen, tiny_llama):
    sender, receiver = tiny_qwen.tokenizer, tiny_llama.tokenizer
    text = "<answer>12 + 30 = 42</answer>"
    ids = [*sender(text, add_special_tokens=False)["input_ids"], sender.eos_token_id]
    lps = tuple(-0.1 * (i + 1) for i in range(len(ids)))
    comp = Completion(text, tuple(ids), lps, "stop", 1.0, sender_token_bytes(sender, text, ids))
    task = Task(TaskRef("chain_sum", {}, 0, 0), "q", "42", {})
    group = Group(task=task, completions=[comp, comp], rewards=[1.0, 0.0], advantages=[1.0, -1.0],
                  source="peer", aligned=False)
    rows = build_rows([group], receiver, lambda t: "prompt")
    our_ids, ends = receiver_ids_and_ends(receiver, text)
    assert rows[0].tokens.completion_ids == [*our_ids, receiver.eos_token_id]
    assert 1 < len(rows[0].chunk_logp) <= len(our_ids) and sum(rows[0].chunk_logp) == pytest.approx(sum(lps))
    assert rows[0].chunks[-1] == rows[0].chunks[-2] == len(rows[0].chunk_logp) - 1  # EOS joins the last chunk
    assert build_rows([group], receiver, lambda t: "prompt", chunks=False)[0].chunks is None
    inputs = loss_inputs(tiny_llama.model, rows, 1.0, receiver.pad_token_id)
    view = behaviour_view(inputs)
    # every token of a chunk carries Σ log π over the chunk − log μ(chunk) (its n_c tokens average back to it)
    n = len(rows[0].tokens.completion_ids)
    per_chunk = torch.zeros(len(rows[0].chunk_logp)).index_add_(0, torch.tensor(rows[0].chunks),
                                                                (view.log_ratio / view.unit_len)[0, :n].detach())
    logp = torch.zeros(len(rows[0].chunk_logp)).index_add_(0, torch.tensor(rows[0].chunks), view.logp[0, :n].detach())
    assert_close(per_chunk, logp - torch.tensor(rows[0].chunk_logp), atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------- PROTOCOL §2's token-bytes rule, from raw bytes

SPLIT_TEXTS = ["数学 ok", "😀 hi", "naïve café — 東京", "Ünïcödé ✓ 🎉🎉 ß", "<answer>日本</answer>", "x€y"]


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte ↔ unicode table (what a ByteLevel BPE vocabulary is written in), inverted."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def rule_token_bytes(tok, ids: list[int]) -> tuple[str, tuple[int, ...]]:
    """docs/PROTOCOL.md §2 read literally, for a byte-level BPE: each token's raw bytes from its vocabulary entry
    (special tokens: none), E_t = the end of the shortest character-aligned prefix of `text` that holds every byte
    the first t + 1 tokens produced; token_bytes[t] = E_t − E_{t−1}. Only for ids whose bytes are valid UTF-8."""
    dec, special = _byte_decoder(), set(tok.all_special_ids)
    raw = [b"" if i in special else bytes(dec[c] for c in tok.convert_ids_to_tokens(i)) for i in ids]
    text = b"".join(raw).decode("utf-8")
    bounds = [0, *accumulate(len(ch.encode()) for ch in text)]
    ends, produced = [], 0
    for r in raw:
        produced += len(r)
        ends.append(bounds[bisect_left(bounds, produced)])
    return text, tuple(b - a for a, b in zip([0, *ends[:-1]], ends))


def _samplings(tok, text: str, rng: random.Random):
    """The canonical ids of `text` and non-canonical ones (pieces of the text encoded apart, one character at a time)."""
    yield tok(text, add_special_tokens=False)["input_ids"]
    yield [i for ch in text for i in tok(ch, add_special_tokens=False)["input_ids"]]
    for _ in range(3):
        cuts = sorted(rng.sample(range(1, len(text)), min(3, len(text) - 1)))
        yield [i for a, b in zip([0, *cuts], [*cuts, len(text)]) for i in tok(text[a:b], add_special_tokens=False)["input_ids"]]


def check_split_characters(tok) -> int:
    """sender_token_bytes equals §2's rule on texts whose characters the tokenizer splits; returns how many of the
    samplings split a character over tokens (the case the rule decides)."""
    rng, split = random.Random(0), 0
    for text in SPLIT_TEXTS:
        for ids in _samplings(tok, text, rng):
            ids = [*ids, tok.eos_token_id]
            decoded, want = rule_token_bytes(tok, ids)
            assert decoded == text == tok.decode(ids, skip_special_tokens=True)
            assert sender_token_bytes(tok, text, ids) == want, (text, ids)
            split += any(b == 0 for b in want[:-1])
    return split


@pytest.mark.parametrize("which", ["tiny_qwen", "tiny_llama"])
def test_a_split_character_counts_for_the_token_that_begins_it_as_protocol_2_says(which, request):
    # before: the offset mapping (canonical ids) gave a split character's bytes to its first token and prefix
    # decoding (any other sampling) to the token that completes it; PROTOCOL §2 said the latter
    assert check_split_characters(request.getfixturevalue(which).tokenizer) > 0


@pytest.mark.slow
def test_a_split_character_counts_for_the_token_that_begins_it_in_smollm2():
    from transformers import AutoTokenizer

    from node.models.load import fetch

    assert check_split_characters(AutoTokenizer.from_pretrained(fetch("smollm2-135m"))) > 0
