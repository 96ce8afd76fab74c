"""The `distill` section of a node's config: serving scores as a teacher, asking named teachers as a student.

Torch-free, so that validating a node's YAML imports neither torch nor the round's code.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_PEER_ID = re.compile(r"[0-9A-Za-z]{1,128}")  # a libp2p peer id (base58) or an in-memory twin's ("n1")
_LOCAL_NODE = re.compile(r"node:[\w.-]{1,64}")  # `swarm local` resolves it to that node's peer id


class DistillConfig(BaseModel):
    """On-policy distillation between peers (docs/ARCHITECTURE.md §13, docs/PROTOCOL.md §11)."""

    model_config = ConfigDict(extra="forbid")
    teachers: list[str] = Field(
        default_factory=list, max_length=16, description="Peers this node asks to score its own completions, by "
        "peer id only (what a peer's records say about themselves, their model name included, never selects a "
        "teacher; an id not listed here is never asked), in turn if several. `swarm local` also takes "
        "`node:<name>`, a node of the same run, and writes its peer id in. A teacher's scores cannot be "
        "re-verified, so only these count. Empty: no distillation. A teacher of another tokenizer is not fit for "
        "use yet: it harmed every measured student (docs/benchmarks/learning.md §12E).")
    coef: float = Field(1.0, ge=0, le=100.0, description="λ: each scored token's advantage gets −λ·(log π_old − "
                        "log π_teacher) added to the reward advantage (losses/distill.py).")
    coef_end: float | None = Field(None, ge=0, le=100.0, description="λ after `coef_rounds` rounds (linear from "
                                   "`coef`); null: λ stays `coef`.")
    coef_rounds: int = Field(0, ge=0, le=10_000_000, description="Rounds over which λ moves from coef to coef_end.")
    wait_s: float = Field(10.0, gt=0, le=600.0, description="The most a round waits for its teacher's answer; a "
                          "later answer is dropped (`late`) and the round trains on the reward alone.")
    max_token_gap: float = Field(10.0, gt=0, le=1e4, description="The most one token's gap between log π_old and "
                                 "log π_teacher may count, either way, in nats: beyond it the gap is clipped "
                                 "(losses/distill.py).")
    max_completion_gap: float = Field(100.0, gt=0, le=1e6, description="The most a completion's gaps may count in all "
                                      "(the sum over its tokens of each gap's size, nats, after max_token_gap): "
                                      "beyond it they are scaled down to it. Whatever the teacher says, it never "
                                      "turns the sign of an answer's advantage: that is a fixed guard, not a setting "
                                      "(losses/distill.py).")
    send_ids: bool = Field(True, description="Send our token ids to a teacher of our tokenizer (its scores are then "
                           "of exactly our tokens); false: always the byte path, as to a teacher of another tokenizer "
                           "(a diagnostic: docs/benchmarks/learning.md §12E).")
    cross_signal: Literal["chunk", "dpca", "exact"] = Field(
        "chunk", description="How a teacher of another tokenizer's chunk values reach our tokens (the byte path; with "
        "one token per chunk and no token marked, as on the id path, all three are the same one-token gap, "
        "losses/distill.py): "
        "`chunk`, every token of a chunk gets the chunk's gap, our final EOS inside it; `dpca`, the chunk's gap shared "
        "out over its tokens in proportion to their own log-probabilities (DPCA's credit), and our final EOS scored "
        "by its own term (the gradient of a forward KL between the two ends' stop probabilities); `exact`, `dpca` and "
        "the tokens where our sampled split of the text is not our tokenizer's own get the largest gap "
        "(max_token_gap): written in our tokenization, the teacher's text distribution gives such a split "
        "probability 0 (docs/benchmarks/learning.md §12F).")
    headroom_margin: float | None = Field(
        None, ge=-1.0, le=1.0, description="Ask a teacher only while its score on our own tasks is at least this much "
        "above ours: the mean reward, under our own verifier, of its own sampled answers that reached us (its groups, "
        "re-verified here; only our training datasets count), against the same over our own groups (node/distill/"
        "gate.py). Until both sides have headroom_groups groups the teacher is not asked. null: no gate, every "
        "named teacher is asked in turn.")
    headroom_groups: int = Field(8, ge=1, le=4096, description="The groups each side's score is the mean over (the "
                                 "latest of each), and the fewest before the gate can open.")
    serve: bool = Field(False, description="Answer peers' score requests with this node's model (a teacher).")
    score_split: Literal["canonical", "requester"] = Field(
        "requester", description="On the byte path (a requester of another tokenizer), which of our tokenizations of "
        "its text we score: `requester`, ours of each of its tokens alone, concatenated, and our EOS where its "
        "completion ended — the events it sampled (with one tokenizer this gives exactly the id path's values); "
        "`canonical`, ours of the whole text (docs/benchmarks/learning.md §12E).")
    serve_tokens_per_s: float = Field(4000.0, gt=0, le=1e9, description="What serving may compute: positions of its "
                                      "forward passes per second (padding included), on average (token buckets).")
    serve_burst_s: float = Field(10.0, gt=0, le=3600.0, description="The bucket holds this many seconds of "
                                 "serve_tokens_per_s: the most one burst of requests may use.")
    serve_students: list[str] = Field(
        default_factory=list, max_length=256, description="Requesters this node serves from a part of its own, by "
        "peer id: an equal part each of (1 − serve_stranger_share) of the budget, which no other requester can "
        "use. Every other requester is a stranger (node/distill/serve.py).")
    serve_stranger_share: float = Field(0.25, ge=0, lt=1.0, description="The part of the budget all strangers share "
                                        "(requesters not in serve_students), however many identities they use; all "
                                        "of it when serve_students is empty.")
    serve_share: float = Field(0.5, gt=0, le=1.0, description="The most of the strangers' part one stranger may use "
                               "(its own bucket at this share of that part's rate and burst).")
    serve_max_tokens: int = Field(16384, ge=16, le=1 << 20, description="The most one request may make this node "
                                  "compute: positions of its forward passes, padding included (rows × (prompt + "
                                  "longest completion), its own tokenization); a request over it is refused "
                                  "(`over_budget`).")
    max_request_bytes: int = Field(1 << 20, ge=1024, le=4 << 20, description="The largest score request or answer, "
                                   "compressed (below hivemind's 4 MiB message cap).")

    @field_validator("teachers")
    @classmethod
    def _teacher_ids(cls, value: list[str]) -> list[str]:
        for t in value:
            if not (_PEER_ID.fullmatch(t) or _LOCAL_NODE.fullmatch(t)):
                raise ValueError(f"{t[:80]!r} is not a peer id: teachers are named by peer id only (a record's "
                                 "model name never selects one); `swarm local` also takes node:<name>")
        return value

    @field_validator("serve_students")
    @classmethod
    def _student_ids(cls, value: list[str]) -> list[str]:
        for t in value:
            if not _PEER_ID.fullmatch(t):
                raise ValueError(f"{t[:80]!r} is not a peer id (serve_students names requesters by peer id)")
        return value

    @model_validator(mode="after")
    def _end_needs_rounds(self) -> DistillConfig:
        if self.coef_end is not None and self.coef_rounds == 0:
            raise ValueError("distill.coef_end needs distill.coef_rounds > 0 (the rounds λ moves over)")
        return self

    @property
    def student(self) -> bool:
        return bool(self.teachers)
