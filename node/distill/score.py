"""A teacher's log-probabilities on a requester's own tokens: one pure function, `score_for_requester`.

Given the teacher's model and tokenizer, a prompt, the requester's completion texts and the
requester's token pieces of each, it returns log π_teacher of every requester token, conditioned on
the prompt and the text before it, of the temperature-scaled distribution log_softmax(logits / T)
(the convention of node/round/logprobs.py). Rows are `prompt ‖ completion`, the prompt being the
requester's rendered prompt tokenized by the teacher without special tokens (as build_rows does).

Same tokenizer (the requester's fingerprint equals the teacher's): the pieces are the requester's
token ids, scored as they are; the value of token t is the teacher's log π(y_t | x, y_<t), one
forward pass, exactly what node.round.logprobs.score_rows gives the teacher's own rows.

Different tokenizers: the pieces are the requester's decoded token strings, which concatenate to the
completion text (a special token, e.g. EOS, decodes to "" and produces no bytes). The teacher
tokenizes the text itself, scores its own tokens, and measures how many UTF-8 bytes of the text
each of them produced (node.round.align.sender_token_bytes). The byte offsets where both
tokenizations end a token cut the text into chunks (node.round.align.chunk_alignment: the same
alignment a receiver makes of a peer's row); the teacher's log-probability of chunk c is the sum
over its own tokens in c, log π_T(c) = Σ_{s ∈ c} log π_T(y_s). That sum is spread evenly over the
n_c requester tokens of c: each gets log π_T(c) / n_c — the geometric spread of
train.cross_tokenizer: chunks-geometric (losses.base), so the values of a chunk's requester tokens
add up to exactly the chunk's log-probability, and when both tokenizations agree on a token it gets
the teacher's own log-probability of that token. A requester token that produces no bytes (EOS)
joins the chunk it ends in (the one before it) and takes its share; the teacher scores no EOS of
its own. A completion the two cannot align (an empty text, or a text whose byte lengths the
teacher's tokenizer cannot measure) gets None: no teacher score for any of its tokens.

One request may mix the two (`same_tokenizer` per completion): each completion is scored by its own path.

Two steps, so that a caller can hold its model's lock for the forward passes only: `prepare` tokenizes and
checks (no forward pass), `run` scores what `prepare` returned. Bounded: `max_tokens` is what one call may
make the model compute, measured as the forward passes run them — padded: rows of ROWS_PER_FORWARD
completions in order, each batch costing its rows × (prompt tokens + its longest completion), `padded_cost` —
and every check is made before any forward pass: first the characters (at most CHARS_PER_TOKEN per budgeted
token, before tokenizing), then the tokens, then the model's context (`context`: prompt + each completion
at most its max_position_embeddings, else `context_overflow`). Above the budget, or on pieces that do not
match the text, `prepare` raises ScoreRefused with a reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate, pairwise

import torch

from node.round.align import chunk_alignment, sender_token_bytes
from node.round.logprobs import TokenRow, score_rows

CHARS_PER_TOKEN = 128  # text beyond this many characters per budgeted token is refused before tokenizing
ROWS_PER_FORWARD = 8  # completions scored together in one forward pass
REFUSALS = ("over_budget", "pieces_mismatch", "bad_token_id", "empty", "context_overflow")


class ScoreRefused(ValueError):
    """A score call the teacher will not run; `reason` is one of REFUSALS."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def piece_bytes(text: str, pieces: Sequence[str]) -> list[int]:
    """UTF-8 bytes of each decoded requester token; ScoreRefused unless they concatenate to `text`."""
    if "".join(pieces) != text:
        raise ScoreRefused("pieces_mismatch", "the requester's token strings do not concatenate to the completion text")
    return [len(p.encode("utf-8")) for p in pieces]


def pieces_of_token_bytes(text: str, token_bytes: Sequence[int]) -> list[str] | None:
    """The requester's token strings from its per-token byte counts (protocols.score carries these), or
    None when a count cuts a character or the counts do not cover the text."""
    data = text.encode("utf-8")
    if sum(token_bytes) != len(data):
        return None
    out, pos = [], 0
    for n in token_bytes:
        try:
            out.append(data[pos:pos + n].decode("utf-8"))
        except UnicodeDecodeError:
            return None
        pos += n
    return out


def padded_cost(prompt_len: int, lengths: Sequence[int]) -> int:
    """Positions the forward passes compute for completions of these lengths after a prompt of `prompt_len`: batches
    of ROWS_PER_FORWARD non-empty completions in order, each its rows × (prompt + its longest completion)."""
    todo = [n for n in lengths if n]
    return sum(len(b) * (prompt_len + max(b)) for b in (todo[i:i + ROWS_PER_FORWARD]
                                                         for i in range(0, len(todo), ROWS_PER_FORWARD)))


def score_for_requester(model: torch.nn.Module, tokenizer, prompt: str, texts: Sequence[str],
                        pieces: Sequence[Sequence[int]] | Sequence[Sequence[str]], *,
                        same_tokenizer: bool | Sequence[bool], max_tokens: int, temperature: float = 1.0,
                        split: str = "requester") -> list[list[float] | None]:
    """log π_teacher of each requester token of each completion (module docstring), or None for a
    completion the two tokenizations cannot align. Raises ScoreRefused before any forward pass."""
    return [values for values, _ in score_chunks_for_requester(
        model, tokenizer, prompt, texts, pieces, same_tokenizer=same_tokenizer, max_tokens=max_tokens,
        temperature=temperature, split=split)]


def teacher_ids(tokenizer, texts: Sequence[str], pieces: Sequence[Sequence[str]], split: str
                ) -> tuple[list[list[int]], list[bool]]:
    """(the teacher's tokens of each completion text on the byte path, whether it appended its own EOS to each).
    Its tokens: its own tokenization of the whole text (`canonical`: never an EOS), or of each requester piece
    alone, concatenated, and its own end-of-sequence token when the requester's last piece produced no text (an EOS
    of the requester's: the completion ended there), so that the teacher scores the events the requester sampled
    (`requester`: every requester boundary is one of ours)."""
    if split == "canonical":
        return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts], [False] * len(texts)
    out, ended = [], []
    for p in pieces:
        nonempty = [x for x in p if x]
        ids = tokenizer(nonempty, add_special_tokens=False)["input_ids"] if nonempty else []
        out.append([t for piece_ids in ids for t in piece_ids])
        ended.append(bool(p) and not p[-1] and tokenizer.eos_token_id is not None and bool(out[-1]))
        if ended[-1]:
            out[-1].append(tokenizer.eos_token_id)
    return out, ended


@dataclass
class Prepared:
    """What `prepare` checked and `run` scores: the teacher's tokens of the prompt and of each completion."""

    prompt_ids: list[int]
    own: list[list[int]]  # the tokens fed to the model after the prompt, per completion
    same: list[bool]  # per completion: scored by id (True) or through the chunk alignment
    texts: list[str]
    ends: list[list[int] | None]  # byte path: the requester's token ends in bytes
    ended: list[bool]  # byte path: the teacher appended its own EOS (teacher_ids)
    cost: int  # padded_cost of the forward passes `run` makes


def prepare(model: torch.nn.Module, tokenizer, prompt: str, texts: Sequence[str],
            pieces: Sequence[Sequence[int]] | Sequence[Sequence[str]], *, same_tokenizer: bool | Sequence[bool],
            max_tokens: int, split: str = "requester", context: int | None = None) -> Prepared:
    """Tokenize and check a request (module docstring): ScoreRefused before any forward pass."""
    if len(texts) != len(pieces):
        raise ScoreRefused("pieces_mismatch", f"{len(texts)} texts but {len(pieces)} piece lists")
    if not texts:
        raise ScoreRefused("empty", "no completions")
    same = [bool(same_tokenizer)] * len(texts) if isinstance(same_tokenizer, bool) else [bool(x) for x in same_tokenizer]
    if len(same) != len(texts):
        raise ScoreRefused("pieces_mismatch", f"{len(texts)} texts but {len(same)} tokenizer flags")
    chars = len(prompt) * len(texts) + sum(len(t) for t in texts)
    if chars > max_tokens * CHARS_PER_TOKEN:
        raise ScoreRefused("over_budget", f"{chars} characters over a budget of {max_tokens} tokens")
    if sum(len(p) for p in pieces) > max_tokens:
        raise ScoreRefused("over_budget", f"more requester tokens than the budget of {max_tokens}")
    by_id = [_checked_ids(p, model) if s else [] for p, s in zip(pieces, same)]
    ends = [None if s else list(accumulate(piece_bytes(t, p))) for t, p, s in zip(texts, pieces, same)]  # checks
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    if not prompt_ids:
        raise ScoreRefused("empty", "the prompt has no tokens")
    byte_idx = [i for i, s in enumerate(same) if not s]
    own_bytes, ended_bytes = teacher_ids(tokenizer, [texts[i] for i in byte_idx], [pieces[i] for i in byte_idx], split)
    own, ended = by_id, [False] * len(texts)
    for i, ids, e in zip(byte_idx, own_bytes, ended_bytes):
        own[i], ended[i] = ids, e
    cost = padded_cost(len(prompt_ids), [len(ids) for ids in own])
    if cost > max_tokens:
        raise ScoreRefused("over_budget", f"{cost} positions to compute over the budget of {max_tokens}")
    if context is not None and len(prompt_ids) + max(len(ids) for ids in own) > context:
        raise ScoreRefused("context_overflow", f"prompt and completion over the model's {context} positions")
    return Prepared(prompt_ids, own, same, list(texts), ends, ended, cost)


def score_chunks_for_requester(model: torch.nn.Module, tokenizer, prompt: str, texts: Sequence[str],
                               pieces: Sequence[Sequence[int]] | Sequence[Sequence[str]], *,
                               same_tokenizer: bool | Sequence[bool], max_tokens: int, temperature: float = 1.0,
                               split: str = "requester") -> list[tuple[list[float] | None, list[int] | None]]:
    """score_for_requester's values with, per completion, the requester tokens in each chunk (in order; Σ = its
    tokens), or None for one token per chunk (the same tokenizer) or a completion not aligned."""
    return run(model, tokenizer, prepare(model, tokenizer, prompt, texts, pieces, same_tokenizer=same_tokenizer,
                                         max_tokens=max_tokens, split=split), temperature)


def run(model: torch.nn.Module, tokenizer, prep: Prepared, temperature: float = 1.0
        ) -> list[tuple[list[float] | None, list[int] | None]]:
    """The forward passes of a prepared request: per completion its values and its requester tokens per chunk."""
    scores = _teacher_logprobs(model, tokenizer, prep.prompt_ids, prep.own, temperature)
    out: list[tuple[list[float] | None, list[int] | None]] = []
    for text, same, recv_ends, ids, lps, ended in zip(prep.texts, prep.same, prep.ends, prep.own, scores, prep.ended):
        if same:
            out.append((lps, None))
            continue
        if ended:  # both ends: the requester's EOS against ours, a chunk of its own (teacher_ids appended ours)
            recv_ends, ids, eos_lp, lps = recv_ends[:-1], ids[:-1], (lps[-1] if lps else None), (lps[:-1] if lps else lps)
        send_bytes = sender_token_bytes(tokenizer, text, ids) if ids else None
        alignment = chunk_alignment(recv_ends, send_bytes, tuple(lps)) if send_bytes and lps is not None else None
        lengths = _lengths(alignment[0], len(alignment[1])) if alignment is not None else None
        if lengths is None:
            out.append((None, None))
        elif ended:
            out.append(([*_spread(*alignment), eos_lp], [*lengths, 1]))
        else:
            out.append((_spread(*alignment), lengths))
    return out


def _lengths(chunks: list[int], n_chunks: int) -> list[int] | None:
    """Requester tokens per chunk, in order (None unless every chunk holds ≥ 1 token, in increasing order)."""
    if any(b < a for a, b in pairwise(chunks)):
        return None
    counts = [0] * n_chunks
    for c in chunks:
        counts[c] += 1
    return counts if all(counts) else None


def _checked_ids(ids: Sequence[int], model: torch.nn.Module) -> list[int]:
    vocab = model.get_output_embeddings().weight.shape[0]
    if not ids or any(not 0 <= int(t) < vocab for t in ids):
        raise ScoreRefused("bad_token_id", f"a completion with no ids or an id outside [0, {vocab})")
    return [int(t) for t in ids]


def _spread(chunks: list[int], chunk_logp: list[float]) -> list[float]:
    """Each requester token's share of its chunk's log-probability: log π_T(c) / n_c."""
    counts = [0] * len(chunk_logp)
    for c in chunks:
        counts[c] += 1
    return [chunk_logp[c] / counts[c] for c in chunks]


@torch.no_grad()
def _teacher_logprobs(model: torch.nn.Module, tokenizer, prompt_ids: list[int], completions: list[list[int]],
                      temperature: float) -> list[list[float] | None]:
    """Per-token log π_T of each completion after the prompt (None for an empty one), in batches."""
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    out: list[list[float] | None] = [None] * len(completions)
    todo = [i for i, ids in enumerate(completions) if ids]
    was_training = model.training
    model.eval()
    try:
        for lo in range(0, len(todo), ROWS_PER_FORWARD):
            batch = todo[lo:lo + ROWS_PER_FORWARD]
            logp, _ = score_rows(model, [TokenRow(prompt_ids, completions[i]) for i in batch], temperature, pad_id)
            for row, i in enumerate(batch):
                out[i] = logp[row, : len(completions[i])].float().cpu().tolist()
    finally:
        model.train(was_training)
    return out
