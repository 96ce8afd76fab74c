"""A teacher's side of on-policy distillation: answering peers' score requests under a budget.

    ScoreBudget   a token bucket of what serving may compute (tokens fed to the model: prompt and completion,
                  in the teacher's tokenization), refilled at `rate` tokens per second up to `burst`; and one
                  bucket per requester at `share` of both, so no requester uses more than its share however
                  often it asks (at most `max_requesters` remembered, the least recent forgotten first)
    ScoreService  `answer(requester, request bytes) → (status, response bytes)`: the request is decoded under
                  ScoreCaps (protocols.score), its swarm checked, the most it may cost (its requester tokens
                  plus the UTF-8 bytes of its prompt and texts: no tokenizer here makes more tokens than bytes) taken from both
                  buckets BEFORE any tokenizing or forward pass — a request over either is refused at once
                  (`over_budget`, `over_share`); then node.distill.score scores it under the same bound and the
                  unused part is given back. Forward passes hold the policy's lock, so they never run inside
                  an optimizer step of the teacher's own training.

Statuses other than `ok` (the refusals the requester sees): a decode reason of protocols.score (`schema`,
`too_large`, `too_many_tokens`, …), `wrong_swarm`, `wrong_tokenizer` (token ids of a tokenizer that is not
ours: the requester sends token_bytes next time), `over_budget`, `over_share`, and node.distill.score's
refusals (`pieces_mismatch`, `bad_token_id`, `empty`). The budget is charged what the scoring fed the model. Every answer is counted by status (`counts`); tokens
scored in `tokens_served`.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from node.distill.score import (
    ScoreRefused,
    pieces_of_token_bytes,
    score_chunks_for_requester,
    teacher_ids,
)
from protocols.codec import RecordError
from protocols.score import (
    ScoreCaps,
    ScoreResponse,
    decode_score_request,
    encode_score_response,
    score_digest,
)
from swarm.bucket import Buckets, TokenBucket


class ScoreBudget:
    """What serving may compute, in all and per requester (module docstring). Thread-safe."""

    def __init__(self, rate: float, burst_s: float, share: float, *, max_requesters: int = 4096,
                 clock: Callable[[], float] = time.monotonic):
        self.rate, self.burst, self.share, self.clock = rate, rate * burst_s, share, clock
        self.max_requesters = max_requesters
        self._all = TokenBucket(rate, self.burst, clock())
        self._by = Buckets(rate * share, self.burst * share, max_requesters)
        self._lock = threading.Lock()

    def take(self, requester: str, tokens: int) -> str | None:
        """Take `tokens` from both buckets; the refusal reason (nothing taken) when either lacks them."""
        with self._lock:
            now = self.clock()
            mine = self._by.get(requester, now)
            if tokens > mine.refill(now):
                return "over_share"
            if tokens > self._all.refill(now):
                return "over_budget"
            mine.level -= tokens
            self._all.level -= tokens
            return None

    def give_back(self, requester: str, tokens: int) -> None:
        """Return tokens taken but not used (a request that cost less than its bound)."""
        with self._lock:
            self._all.give_back(tokens)
            mine = self._by.peek(requester)
            if mine is not None:
                mine.give_back(tokens)


@dataclass
class Teacher:
    """What a teacher scores with: its model (the live policy), tokenizer, fingerprint and the policy's lock."""

    model: object
    tokenizer: object
    fingerprint: str
    lock: threading.RLock


class ScoreService:
    """Answers score requests (module docstring)."""

    def __init__(self, teacher: Teacher, swarm_id: str, budget: ScoreBudget, *, caps: ScoreCaps,
                 max_tokens: int, logprob_dtype: str = "f32", split: str = "requester"):
        self.teacher, self.swarm_id, self.budget, self.caps = teacher, swarm_id, budget, caps
        self.split = split  # which of our tokenizations of a byte-path text we score (node.distill.score.teacher_ids)
        self.max_tokens, self.logprob_dtype = max_tokens, logprob_dtype
        self.counts: Counter = Counter()  # status → requests answered so
        self.tokens_served = 0  # requester tokens given a log-probability
        self.tokens_computed = 0  # tokens fed to the model for them (prompt and completion, our tokenization)
        self._lock = threading.Lock()

    def answer(self, requester: str, data: bytes) -> tuple[str, bytes]:
        status, response = self._answer(requester, data)
        with self._lock:
            self.counts[status] += 1
        return status, response

    def take_counts(self) -> tuple[dict[str, int], int, int]:
        """(requests answered by status, tokens served, tokens computed) since the last call."""
        with self._lock:
            out = dict(self.counts), self.tokens_served, self.tokens_computed
            self.counts, self.tokens_served, self.tokens_computed = Counter(), 0, 0
        return out

    def _answer(self, requester: str, data: bytes) -> tuple[str, bytes]:
        try:
            req = decode_score_request(data, self.caps)
        except RecordError as exc:
            return exc.reason, b""
        if req.swarm != self.swarm_id:
            return "wrong_swarm", b""
        with_ids = req.tokenizer is not None
        if with_ids and req.tokenizer != self.teacher.fingerprint:
            return "wrong_tokenizer", b""
        prompt_bytes = len(req.prompt.encode())
        bound = sum(prompt_bytes + c.n_tokens + len(c.text.encode()) for c in req.completions)
        bound = min(bound, self.max_tokens)  # what score_for_requester will refuse above
        refused = self.budget.take(requester, bound)
        if refused:
            return refused, b""
        spent = 0
        try:
            if with_ids:
                pieces = [c.token_ids for c in req.completions]
            else:
                pieces = [pieces_of_token_bytes(c.text, c.token_bytes) for c in req.completions]
                if any(p is None for p in pieces):
                    return "pieces_mismatch", b""
            texts = [c.text for c in req.completions]
            with self.teacher.lock:
                scores = score_chunks_for_requester(self.teacher.model, self.teacher.tokenizer, req.prompt, texts, pieces,
                                             same_tokenizer=with_ids, max_tokens=bound, temperature=req.temperature,
                                             split=self.split)
            spent = min(bound, self._cost(req.prompt, texts, pieces, with_ids))
        except ScoreRefused as exc:
            return exc.reason, b""
        finally:
            if spent < bound:
                self.budget.give_back(requester, bound - spent)
        logprobs = tuple(tuple(s) if s is not None else () for s, _ in scores)
        chunks = tuple(tuple(c) if c is not None else () for _, c in scores)
        with self._lock:
            self.tokens_served += sum(len(s) for s in logprobs)
            self.tokens_computed += spent
        return "ok", encode_score_response(ScoreResponse(score_digest(data), logprobs, chunks), logprob_dtype=self.logprob_dtype)

    def _cost(self, prompt: str, texts: list[str], pieces: list, with_ids: bool) -> int:
        """What the scoring fed the model: per completion, the prompt and its tokens in our tokenization."""
        tok = self.teacher.tokenizer
        n_prompt = len(tok(prompt, add_special_tokens=False)["input_ids"])
        own = [len(p) for p in pieces] if with_ids else [len(ids) for ids in teacher_ids(tok, texts, pieces, self.split)]
        return sum(n_prompt + n for n in own)
