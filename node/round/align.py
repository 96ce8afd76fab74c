"""Byte alignment of two tokenizations of one completion text (docs/ARCHITECTURE.md §6).

A sender publishes, next to its token ids, how many UTF-8 bytes of `text` each token produced
(`Completion.token_bytes`, docs/PROTOCOL.md §2). A receiver with another tokenizer re-tokenises
the text and knows the same for its own tokens. The *common boundaries* are the byte offsets
where both tokenizations end a token; between two consecutive ones lies a **chunk**: the same
piece of text, produced by ≥ 1 sender token and ≥ 1 receiver token, after the same text prefix.
Its sender log-probability is the sum of the sender's logprobs over its tokens, so

    log r_c = Σ_{t ∈ c} log π_θ(y_t) − Σ_{s ∈ c} log μ(y_s)

compares both models on the same event. When the two tokenizations agree every chunk is one
token and r_c is the ordinary per-token ratio; when they share no boundary but the end, there is
one chunk and r_c is the sequence ratio. Special tokens (EOS) produce no bytes and join the chunk
before them, so a sampled EOS on both sides lands in the last chunk of both.

Where a token ends is read from the fast tokenizer's offset mapping of `text` when re-tokenising
gives back the sampled ids (the usual case), else from decoding each token alone when the pieces
concatenate to `text`, else from decoding growing prefixes of the ids (at most
MAX_DECODE_TOKENS of them). The bytes of a character split over several tokens count for the
first of them, the one that begins it (the others get 0): that is what a fast byte-level
tokenizer's offset mapping gives, and it keeps that token's log μ in the chunk of the character
it began. A token whose prefix does not decode to a prefix of `text` followed by at most the start
of the next character (clean-up of spaces) gets 0 bytes and its bytes go to the next token that
ends cleanly.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate

MAX_DECODE_TOKENS = 1024  # longer completions whose ids do not re-tokenise canonically get no token_bytes


def _byte_offsets(text: str) -> list[int]:
    """[len(text) + 1] byte offset of each character boundary of `text` in UTF-8."""
    return [0, *accumulate(len(ch.encode("utf-8")) for ch in text)]


def _ends_from_offsets(char_ends: list[int], text: str) -> list[int]:
    """Cumulative byte ends [L] from per-token character ends: non-decreasing, the last = all bytes
    (bytes the offsets leave out, e.g. trimmed trailing spaces, go to the last token)."""
    bo = _byte_offsets(text)
    ends, last = [], 0
    for e in char_ends:
        last = max(last, bo[min(max(e, 0), len(text))])
        ends.append(last)
    if ends:
        ends[-1] = bo[-1]
    return ends


def _prefix_end(prefix: str, text: str, bo: list[int]) -> int:
    """E_t of docs/PROTOCOL.md §2 from the decoding of the first t + 1 tokens: all of `prefix` when it is a prefix
    of `text`; when it is one followed by U+FFFD (the first bytes of the next character, not complete yet), through
    that next character — the bytes of a split character count for the token that begins it, as the offset
    mapping of a fast byte-level tokenizer gives them; otherwise (clean-up of spaces) 0."""
    if text.startswith(prefix):
        return bo[len(prefix)]
    head = prefix.rstrip("\ufffd")
    if len(head) < len(prefix) and len(head) < len(text) and text.startswith(head):
        return bo[len(head) + 1]
    return 0


def receiver_ids_and_ends(tokenizer, text: str) -> tuple[list[int], list[int] | None]:
    """Our tokenization of `text` and each token's cumulative byte end (None without offsets)."""
    try:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    except (NotImplementedError, TypeError, ValueError):  # a slow tokenizer has no offsets
        return tokenizer(text, add_special_tokens=False)["input_ids"], None
    ids = list(enc["input_ids"])
    return ids, _ends_from_offsets([e for _, e in enc["offset_mapping"]], text)


def sender_token_bytes(tokenizer, text: str, ids: tuple[int, ...] | list[int]) -> tuple[int, ...] | None:
    """UTF-8 bytes of `text` each sampled token produced (Σ = len(text.encode())), or None."""
    ids = list(ids)
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    text_pos = [i for i, t in enumerate(ids) if t not in special]
    ends = [0] * len(ids)
    total = len(text.encode("utf-8"))
    canon, canon_ends = receiver_ids_and_ends(tokenizer, text)
    pieces = None
    if canon_ends is None or canon != [ids[i] for i in text_pos]:
        pieces = tokenizer.batch_decode([[ids[i]] for i in text_pos], skip_special_tokens=True)
    if pieces is None:
        for i, e in zip(text_pos, canon_ends):
            ends[i] = e
    elif "".join(pieces) == text:  # each token decodes on its own to its share of the text
        for i, e in zip(text_pos, accumulate(len(p.encode("utf-8")) for p in pieces)):
            ends[i] = e
    elif len(ids) <= MAX_DECODE_TOKENS:
        bo = _byte_offsets(text)
        for i in text_pos:
            ends[i] = _prefix_end(tokenizer.decode(ids[: i + 1], skip_special_tokens=True), text, bo)
    else:
        return None
    for i in range(1, len(ends)):  # special tokens and unclean prefixes: no bytes of their own
        ends[i] = max(ends[i], ends[i - 1])
    if not ids or ends[-1] > total:
        return None
    if ends[-1] < total:  # bytes no clean prefix reached (e.g. the last character) go to the last text token
        if not text_pos:
            return None
        last = text_pos[-1]
        ends[last:] = [total] * (len(ends) - last)
    return tuple(b - a for a, b in zip([0, *ends[:-1]], ends))


def chunk_alignment(recv_ends: list[int], send_bytes: tuple[int, ...], send_logprobs: tuple[float, ...],
                    ) -> tuple[list[int], list[float]] | None:
    """Chunk index of each receiver token [T] and the sender's log μ of each chunk [K] (module doc).

    recv_ends: cumulative byte end of each of our tokens; send_bytes: the sender's bytes per token.
    None when the two do not cover the same number of bytes (then the sequence ratio applies).
    """
    send_ends = list(accumulate(send_bytes))
    if not recv_ends or not send_ends or recv_ends[-1] != send_ends[-1] or len(send_logprobs) != len(send_ends):
        return None
    common = sorted(set(recv_ends).intersection(send_ends).difference({0})) or [0]

    def chunk_of(end: int) -> int:
        return min(bisect_left(common, end), len(common) - 1)

    mu = [0.0] * len(common)
    for e, lp in zip(send_ends, send_logprobs):
        mu[chunk_of(e)] += lp
    return [chunk_of(e) for e in recv_ends], mu
