"""A student's side of on-policy distillation: each round, its own completions to a named teacher, the answers
onto its own groups.

    choose    the teacher of the round: among the peers `distill.teachers` names, by peer id, one per round, in
              turn (the node's own id left out). Nothing a peer sends selects a teacher — not its records, nor the
              model name they carry — and no peer outside the list is ever asked or believed: a teacher's scores
              cannot be re-verified.
    ask       right after the round's own groups are sampled (before peers' groups are gathered, so the teacher
              scores while the round gathers): one score request per own group (protocols.score: the prompt,
              the completion texts and our token ids — or, for a teacher that refused our tokenizer
              (`wrong_tokenizer`), the bytes of text each of our tokens produced), all sent at once; a request
              the teacher refuses for our ids is sent again by bytes at once, within the same wait
    collect   before selection: waits for the answers until `distill.wait_s` after the requests left, never
              longer; each answer is decoded against its own request (protocols.score.decode_score_response:
              the request's digest, one value per token, finite, ≤ 0, not absurd) and its values become the
              group's `teacher_logps` (node.round.groups.Group), which the train step carries to the loss
              (losses.distill). On the byte path our special tokens inside a chunk of text are left unscored
              (`_text_only`), and so is a completion whose text holds U+FFFD: a sampled byte that is no
              UTF-8 text decodes to it, and the teacher would score that character's three bytes, and every
              later token after them, in place of what was sampled. An answer that fails, is refused or comes late is dropped with its reason and
              its group trains on the reward alone; a late answer is never used later (the round has moved on).

Metrics of the round (`distill_*`): the teacher asked, requests, answers used, own completions scored (share),
student tokens scored, seconds waited, drops by reason; the loss adds the student's KL to the teacher on its
scored tokens (`distill_kl`) and λ (`distill_lambda`).
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from losses.distill import EOS, OFF_SPLIT, TEXT
from node.round.align import sender_token_bytes
from node.round.groups import Group
from protocols.codec import RecordError
from protocols.score import (
    ScoreCaps,
    ScoreCompletion,
    ScoreRequest,
    decode_score_response,
    encode_score_request,
    score_digest,
)
from swarm.exchange.score_stream import ScoreFailed

if TYPE_CHECKING:
    from node.distill.config import DistillConfig
    from node.distill.gate import HeadroomGate

log = logging.getLogger(__name__)
LOST = "\ufffd"  # what decoding puts for bytes that are no UTF-8 text: the text no longer holds the tokens sampled


@dataclass
class Pending:
    group: Group
    request: ScoreRequest
    digest: str
    answer: concurrent.futures.Future


@dataclass
class Asked:
    """The round's score requests in flight."""

    teacher: str | None
    started: float
    pending: list[Pending] = field(default_factory=list)
    drops: Counter = field(default_factory=Counter)


class Student:
    """Asks named teachers to score its own completions (module docstring)."""

    def __init__(self, cfg: DistillConfig, link, *, swarm_id: str, tokenizer, fingerprint: str, vocab_size: int,
                 temperature: float, caps: ScoreCaps, gate: HeadroomGate | None = None):
        self.cfg, self.link, self.swarm_id, self.tokenizer = cfg, link, swarm_id, tokenizer
        self.gate = gate  # which named teachers have headroom over us (node.distill.gate); None: all of them
        self.fingerprint, self.vocab_size, self.temperature, self.caps = fingerprint, vocab_size, temperature, caps
        self.bytes_only: set[str] = set()  # teachers that refused our token ids (another tokenizer)
        self.special_ids = frozenset(getattr(tokenizer, "all_special_ids", ()) or ())  # tokens that produce no text

    def teachers(self) -> list[str]:
        """The peers `distill.teachers` names, by peer id, in its order, without this node itself."""
        return [t for t in dict.fromkeys(self.cfg.teachers) if t != self.link.peer_id]

    def ask(self, round_: int, groups: list[Group], prompts: list[str]) -> Asked:
        named = self.teachers()
        if self.gate is not None:
            self.gate.observe(groups)
        candidates = [t for t in named if self.gate is None or self.gate.may_ask(t)]
        asked = Asked(candidates[round_ % len(candidates)] if candidates else None, time.monotonic())
        if asked.teacher is None:
            if named:  # every named teacher is gated (node.distill.gate)
                asked.drops["no_headroom"] += len(groups)
            else:
                asked.drops["no_teacher"] += len(groups)
            return asked
        ids = self.cfg.send_ids and asked.teacher not in self.bytes_only
        for group, prompt in zip(groups, prompts):
            try:
                req = self._request(group, prompt, ids)
                data = encode_score_request(req)
            except ValueError:  # nothing a teacher could take (an empty completion, over the caps)
                asked.drops["unaskable"] += 1
                continue
            if len(data) > self.cfg.max_request_bytes:
                asked.drops["too_large"] += 1
                continue
            asked.pending.append(Pending(group, req, score_digest(data), self.link.ask(asked.teacher, data)))
        return asked

    def _again_by_bytes(self, teacher: str, p: Pending) -> Pending | None:
        """The request of `p`, which the teacher refused for our token ids (`wrong_tokenizer`), sent again by bytes
        (None: it cannot be, as in `ask`)."""
        try:
            req = self._request(p.group, p.request.prompt, False)
            data = encode_score_request(req)
        except ValueError:
            return None
        if len(data) > self.cfg.max_request_bytes:
            return None
        return Pending(p.group, req, score_digest(data), self.link.ask(teacher, data))

    def _request(self, group: Group, prompt: str, ids: bool) -> ScoreRequest:
        comps = tuple(ScoreCompletion(c.text, token_ids=tuple(c.token_ids)) if ids else
                      ScoreCompletion(c.text, token_bytes=tuple(c.token_bytes or sender_token_bytes(
                          self.tokenizer, c.text, c.token_ids) or ())) for c in group.completions)
        if sum(c.n_tokens for c in comps) > self.caps.max_tokens or len(comps) > self.caps.max_completions:
            raise ValueError("over the score caps")
        return ScoreRequest(self.swarm_id, prompt, comps, temperature=self.temperature,
                            tokenizer=self.fingerprint if ids else None, vocab_size=self.vocab_size if ids else None)

    def _text_only(self, values, chunks: list[int], ids) -> list[float | None]:
        """A byte-path answer's values with our special tokens (EOS, padding: they produce no text) left unscored
        (None) in every chunk that also holds text tokens, the chunk's teacher log-probability going to those:
        the teacher scored the text, and a special token's own log-probability in the chunk's gap, with nothing
        of the teacher's against it, would reward sampling it the less likely it is. A chunk of special tokens
        alone (our final EOS against the teacher's, `score_split: requester`) keeps its value."""
        out: list[float | None] = list(values)
        start = 0
        for n in chunks:
            span = range(start, start + n)
            text = [t for t in span if int(ids[t]) not in self.special_ids]
            if n > 1 and 0 < len(text) < n:
                share = sum(values[t] for t in span) / len(text)
                for t in span:
                    out[t] = share if t in text else None
            start += n
        return out

    def _kinds(self, chunks: list[int], completion) -> tuple[list[int], bool]:
        """(each token's kind for losses.distill on the byte path: TEXT, EOS for our final EOS when it is a chunk of its
        own (the teacher's end against ours), OFF_SPLIT for the tokens where our sampled split of the text is not our
        tokenizer's own tokenization of it — every text token from the first that differs to the last, the common
        prefix and suffix of the two token sequences left TEXT; whether there are any of the last)."""
        ids = [int(t) for t in completion.token_ids]
        kinds = [TEXT] * len(ids)
        if ids and chunks and chunks[-1] == 1 and ids[-1] in self.special_ids:
            kinds[-1] = EOS
        text = [t for t in ids if t not in self.special_ids]
        canon = list(self.tokenizer(completion.text, add_special_tokens=False)["input_ids"])
        if text == canon:
            return kinds, False
        n, m = len(text), len(canon)
        a = next((i for i, (x, y) in enumerate(zip(text, canon)) if x != y), min(n, m))  # common prefix
        b = 0  # common suffix, after the prefix
        while b < n - a and b < m - a and text[n - 1 - b] == canon[m - 1 - b]:
            b += 1
        positions = [i for i, t in enumerate(ids) if t not in self.special_ids]  # text tokens' places among ids
        for i in positions[a:len(positions) - b]:
            kinds[i] = OFF_SPLIT
        return kinds, True

    def _values(self, values, chunks: list[int] | None, completion) -> list[float | None] | None:
        """One completion's teacher values as the group keeps them: None when the teacher gave none, or, on the
        byte path (`chunks`), when the text lost sampled bytes (LOST); byte-path values with our special tokens left
        unscored (`_text_only`); id-path values as they came."""
        if not values:
            return None
        if chunks is None:
            return list(values)
        return None if LOST in completion.text else self._text_only(values, chunks, completion.token_ids)

    def collect(self, asked: Asked, gathered: list[Group] = ()) -> dict:
        """Wait (until distill.wait_s after the requests left) for the answers; their values onto the groups.
        `gathered`: the round's groups from peers, for the headroom gate."""
        if self.gate is not None:
            self.gate.observe(list(gathered))
        drops = Counter(asked.drops)
        used = tokens = completions = byte_path = off_split = retried = 0
        todo = list(asked.pending)  # grows by the requests asked again by bytes (a teacher of another tokenizer)
        while todo:
            p = todo.pop(0)
            left = asked.started + self.cfg.wait_s - time.monotonic()
            try:
                data = p.answer.result(timeout=max(0.0, left))
                resp = decode_score_response(data, p.request, p.digest, self.caps)
            except concurrent.futures.TimeoutError:
                p.answer.cancel()
                drops["late"] += 1
                continue
            except (ScoreFailed, RecordError) as exc:
                if exc.reason == "refused:wrong_tokenizer" and asked.teacher not in self.bytes_only:
                    self.bytes_only.add(asked.teacher)
                    log.warning("teacher %s has another tokenizer: its scores come through the byte path, which "
                                "has harmed every measured student so far (docs/benchmarks/learning.md §12E)", asked.teacher)
                if exc.reason == "refused:wrong_tokenizer" and p.request.tokenizer is not None:
                    again = self._again_by_bytes(asked.teacher, p)  # within the same wait: this round is scored too
                    if again is not None:
                        todo.append(again)
                        retried += 1
                        continue
                if not drops[exc.reason]:  # once per reason and round
                    log.info("a score answer from %s dropped: %s", asked.teacher, exc)
                drops[exc.reason] += 1
                continue
            chunks = [list(c) if c else None for c in (resp.chunks or [()] * len(resp.logprobs))]
            p.group.teacher_logps = [self._values(lp, c, comp)
                                     for lp, c, comp in zip(resp.logprobs, chunks, p.group.completions)]
            p.group.teacher_chunks = chunks
            kinds = [self._kinds(c, comp) if c is not None and v is not None else (None, False)
                     for c, v, comp in zip(chunks, p.group.teacher_logps, p.group.completions)]
            p.group.teacher_kinds = [k for k, _ in kinds] if any(k is not None for k, _ in kinds) else None
            byte_path += sum(k is not None for k, _ in kinds)
            off_split += sum(off for _, off in kinds)
            used += 1
            completions += sum(bool(lp) for lp in resp.logprobs)
            tokens += sum(len(lp) for lp in resp.logprobs)
        own = sum(len(p.group.completions) for p in asked.pending)
        return {"distill_teacher": asked.teacher, "distill_requests": len(asked.pending), "distill_answers": used,
                "distill_completions_scored": completions, "distill_share_scored": completions / own if own else 0.0,
                "distill_tokens_scored": tokens, "distill_wait_s": round(time.monotonic() - asked.started, 3),
                "distill_drops": dict(drops) or None, "distill_retried": retried,  # asked again by bytes
                # byte path: the share of our scored completions whose sampled split is not our tokenizer's own
                "distill_off_split": off_split / byte_path if byte_path else None,
                "distill_gate": self.gate.report() if self.gate is not None else None}
