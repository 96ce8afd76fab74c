"""A teacher's side of on-policy distillation: answering peers' score requests under a budget.

    ScoreBudget   token buckets of what serving may compute (positions its forward passes run, padding included),
                  refilled at `rate` a second up to `burst`, split so that no number of identities gets more than
                  its part: each requester named in `students` (distill.serve_students, by peer id) has a bucket
                  of its own, an equal part of (1 − stranger_share) of the rate and the burst; every other
                  requester is a stranger, and all strangers together draw on one pool of `stranger_share` of
                  them (all of them when no students are named), each stranger at most `share` of that pool (its
                  own bucket; at most `max_requesters` remembered, the least recent forgotten first). A crowd of
                  identities thus shares the strangers' pool and never touches a named student's part.
    ScoreService  `answer(requester, request bytes) → (status, response bytes)`: the request is decoded under
                  ScoreCaps (protocols.score), its swarm and tokenizer checked, and the most it may cost — the
                  padded cost of its forward passes (node.distill.score.padded_cost) with every prompt and
                  completion at its longest (the UTF-8 bytes of the prompt + 1, of each completion its tokens, plus
                  its text's UTF-8 bytes on the byte path: no tokenizer here makes more tokens than that), at most
                  `max_tokens` — is taken from the requester's bucket (and, for a stranger, the pool) BEFORE any
                  tokenizing. A request over it is refused at once (`over_share`, `over_budget`). Then
                  node.distill.score.prepare tokenizes and checks it (the exact padded cost, the model's context),
                  outside the policy's lock; only the forward passes (node.distill.score.run) hold it, so they never
                  run inside an optimizer step of the teacher's own training. What was taken is kept for the work
                  done: a request refused after tokenizing, or whose scoring raised (an out-of-memory error
                  included: `internal_error`), gives nothing back; an answered one gives back only the part of its
                  bound its forward passes did not compute.

Statuses other than `ok` (the refusals the requester sees; docs/PROTOCOL.md §11): a decode reason of protocols.score
(`schema`, `too_large`, `too_many_tokens`, …), `wrong_swarm`, `wrong_tokenizer` (token ids of a tokenizer that is
not ours: the requester sends token_bytes next time), `over_budget`, `over_share`, node.distill.score's refusals
(`pieces_mismatch`, `bad_token_id`, `empty`, `context_overflow`) and `internal_error`. Every answer is counted by
status (`counts`); requester tokens given a value in `tokens_served`, positions computed in `tokens_computed`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from node.distill.score import ScoreRefused, padded_cost, pieces_of_token_bytes, prepare, run
from protocols.codec import RecordError
from protocols.score import (
    ScoreCaps,
    ScoreRequest,
    ScoreResponse,
    decode_score_request,
    encode_score_response,
    score_digest,
)
from swarm.bucket import Buckets, TokenBucket

log = logging.getLogger(__name__)


class ScoreBudget:
    """What serving may compute, per named student and for strangers (module docstring). Thread-safe."""

    def __init__(self, rate: float, burst_s: float, share: float, *, students: Iterable[str] = (),
                 stranger_share: float = 1.0, max_requesters: int = 4096, clock: Callable[[], float] = time.monotonic):
        students = sorted(set(students))
        pool = stranger_share if students else 1.0
        self.rate, self.burst, self.share, self.clock = rate, rate * burst_s, share, clock
        now = clock()
        each = (1.0 - pool) / len(students) if students else 0.0
        self._students = {s: TokenBucket(rate * each, self.burst * each, now) for s in students}
        self._pool = TokenBucket(rate * pool, self.burst * pool, now)
        self._by = Buckets(rate * pool * share, self.burst * pool * share, max_requesters)
        self._lock = threading.Lock()

    def take(self, requester: str, tokens: int) -> str | None:
        """Take `tokens` for `requester`; the refusal reason (nothing taken) when its part lacks them."""
        with self._lock:
            now = self.clock()
            own = self._students.get(requester)
            if own is not None:
                return None if own.take(tokens, now) else "over_share"
            mine = self._by.get(requester, now)
            if tokens > mine.refill(now):
                return "over_share"
            if tokens > self._pool.refill(now):
                return "over_budget"
            mine.level -= tokens
            self._pool.level -= tokens
            return None

    def give_back(self, requester: str, tokens: int) -> None:
        """Return tokens taken and not computed (the part of a request's bound its forward passes did not use)."""
        with self._lock:
            own = self._students.get(requester)
            if own is not None:
                own.give_back(tokens)
                return
            self._pool.give_back(tokens)
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


def request_bound(req: ScoreRequest) -> int:
    """The most a request's forward passes can compute, from its sizes alone (module docstring)."""
    prompt = len(req.prompt.encode()) + 1
    longest = [c.n_tokens if c.token_ids is not None else (c.n_tokens + len(c.text.encode())) * bool(c.text)
               for c in req.completions]
    return padded_cost(prompt, longest)


class ScoreService:
    """Answers score requests (module docstring)."""

    def __init__(self, teacher: Teacher, swarm_id: str, budget: ScoreBudget, *, caps: ScoreCaps,
                 max_tokens: int, logprob_dtype: str = "f32", split: str = "requester"):
        self.teacher, self.swarm_id, self.budget, self.caps = teacher, swarm_id, budget, caps
        self.split = split  # which of our tokenizations of a byte-path text we score (node.distill.score.teacher_ids)
        self.max_tokens, self.logprob_dtype = max_tokens, logprob_dtype
        context = getattr(getattr(teacher.model, "config", None), "max_position_embeddings", None)
        self.context = context if isinstance(context, int) else None
        self.counts: Counter = Counter()  # status → requests answered so
        self.tokens_served = 0  # requester tokens given a log-probability
        self.tokens_computed = 0  # positions the forward passes computed for them (padding included)
        self._lock = threading.Lock()

    def answer(self, requester: str, data: bytes) -> tuple[str, bytes]:
        """(status, response bytes) for one request; never raises (an error of our own is `internal_error`)."""
        try:
            status, response = self._answer(requester, data)
        except Exception:  # a bug or an out-of-memory error: the requester gets a status, what was taken stays taken
            log.exception("scoring a request of %s failed", requester)
            status, response = "internal_error", b""
        with self._lock:
            self.counts[status] += 1
        return status, response

    def take_counts(self) -> tuple[dict[str, int], int, int]:
        """(requests answered by status, tokens served, positions computed) since the last call."""
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
        same = [c.token_ids is not None for c in req.completions]
        if any(same) and req.tokenizer != self.teacher.fingerprint:
            return "wrong_tokenizer", b""
        bound = min(request_bound(req), self.max_tokens)
        refused = self.budget.take(requester, bound)
        if refused:
            return refused, b""
        # from here on the bound is spent unless the forward passes prove to need less (module docstring)
        pieces = [c.token_ids if s else pieces_of_token_bytes(c.text, c.token_bytes)
                  for c, s in zip(req.completions, same)]
        if any(p is None for p in pieces):
            return "pieces_mismatch", b""
        tok, model = self.teacher.tokenizer, self.teacher.model
        try:
            prep = prepare(model, tok, req.prompt, [c.text for c in req.completions], pieces, same_tokenizer=same,
                           max_tokens=bound, split=self.split, context=self.context)
            with self.teacher.lock:
                scores = run(model, tok, prep, req.temperature)
        except ScoreRefused as exc:
            return exc.reason, b""
        self.budget.give_back(requester, bound - prep.cost)
        logprobs = tuple(tuple(s) if s is not None else () for s, _ in scores)
        chunks = tuple(tuple(c) if c is not None else () for _, c in scores)
        with self._lock:
            self.tokens_served += sum(len(s) for s in logprobs)
            self.tokens_computed += prep.cost
        response = ScoreResponse(score_digest(data), logprobs, chunks if any(chunks) else None)
        return "ok", encode_score_response(response, logprob_dtype=self.logprob_dtype)
