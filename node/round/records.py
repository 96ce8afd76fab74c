"""Our verified groups → wire records (protocols.records.RolloutRecord), one record per prompt group."""

from __future__ import annotations

from typing import TYPE_CHECKING

from node.round.align import sender_token_bytes
from node.round.groups import Group
from protocols.records import Completion, ModelInfo, RolloutRecord, SamplingInfo

if TYPE_CHECKING:
    from node.round.parts import RoundParts


def to_records(parts: RoundParts, round_: int, groups: list[Group], prompts: list[str]) -> list[RolloutRecord]:
    g = parts.cfg.generation
    model = ModelInfo(name=parts.cfg.model.spec, tokenizer=parts.fingerprint, vocab_size=parts.vocab_size)
    sampling = SamplingInfo(temperature=g.temperature, top_p=g.top_p, max_new_tokens=g.max_new_tokens)
    now = parts.clock()
    return [
        RolloutRecord(
            swarm=parts.cfg.swarm.swarm_id,
            peer=parts.peer_id,
            round=round_,
            policy_version=group.policy_version,
            created_at=now,
            model=model,
            sampling=sampling,
            task=group.task.ref,
            prompt=prompt,
            completions=tuple(
                Completion(c.text, c.token_ids, c.logprobs, c.finish_reason, reward_claimed=r,
                           token_bytes=sender_token_bytes(parts.tokenizer, c.text, c.token_ids))
                for c, r in zip(group.completions, group.rewards)
            ),
        )
        for group, prompt in zip(groups, prompts)
    ]
