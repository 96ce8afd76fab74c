"""The `distill` section of a node's config: serving scores as a teacher, asking named teachers as a student.

Torch-free, so that validating a node's YAML imports neither torch nor the round's code.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class DistillConfig(BaseModel):
    """On-policy distillation between peers (docs/ARCHITECTURE.md §13, docs/PROTOCOL.md §11)."""

    model_config = ConfigDict(extra="forbid")
    teachers: list[str] = Field(
        default_factory=list, max_length=16, description="Peers this node asks to score its own completions: peer "
        "ids, or model names a peer's records carry. A teacher's scores cannot be re-verified, so only these count. "
        "Empty: no distillation. A teacher of another tokenizer is not fit for use yet: it harmed every measured "
        "student (docs/BENCHMARKS.md §12E).")
    coef: float = Field(1.0, ge=0, le=100.0, description="λ: each scored token's advantage gets −λ·(log π_old − "
                        "log π_teacher) added to the reward advantage (losses/distill.py).")
    coef_end: float | None = Field(None, ge=0, le=100.0, description="λ after `coef_rounds` rounds (linear from "
                                   "`coef`); null: λ stays `coef`.")
    coef_rounds: int = Field(0, ge=0, le=10_000_000, description="Rounds over which λ moves from coef to coef_end.")
    wait_s: float = Field(10.0, gt=0, le=600.0, description="The most a round waits for its teacher's answer; a "
                          "later answer is dropped (`late`) and the round trains on the reward alone.")
    send_ids: bool = Field(True, description="Send our token ids to a teacher of our tokenizer (its scores are then "
                           "of exactly our tokens); false: always the byte path, as to a teacher of another tokenizer "
                           "(a diagnostic: docs/BENCHMARKS.md §12E).")
    serve: bool = Field(False, description="Answer peers' score requests with this node's model (a teacher).")
    score_split: Literal["canonical", "requester"] = Field(
        "requester", description="On the byte path (a requester of another tokenizer), which of our tokenizations of "
        "its text we score: `requester`, ours of each of its tokens alone, concatenated, and our EOS where its "
        "completion ended — the events it sampled (with one tokenizer this gives exactly the id path's values); "
        "`canonical`, ours of the whole text (docs/BENCHMARKS.md §12E).")
    serve_tokens_per_s: float = Field(4000.0, gt=0, le=1e9, description="What serving may compute: tokens fed to "
                                      "the model per second, on average (a token bucket).")
    serve_burst_s: float = Field(10.0, gt=0, le=3600.0, description="The bucket holds this many seconds of "
                                 "serve_tokens_per_s: the most one burst of requests may use.")
    serve_share: float = Field(0.5, gt=0, le=1.0, description="The most of the budget one requester may use "
                               "(its own bucket at this share of the rate and of the burst).")
    serve_max_tokens: int = Field(16384, ge=16, le=1 << 20, description="The most tokens one request may make this "
                                  "node score (prompt and completion, its own tokenization, all completions).")
    max_request_bytes: int = Field(1 << 20, ge=1024, le=4 << 20, description="The largest score request or answer, "
                                   "compressed (below hivemind's 4 MiB message cap).")

    @model_validator(mode="after")
    def _end_needs_rounds(self) -> DistillConfig:
        if self.coef_end is not None and self.coef_rounds == 0:
            raise ValueError("distill.coef_end needs distill.coef_rounds > 0 (the rounds λ moves over)")
        return self

    @property
    def student(self) -> bool:
        return bool(self.teachers)
