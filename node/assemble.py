"""A node's composition root: every part its rounds read, built from its config (and its transport).

  NodeParts        the parts: model and tokenizer, tasks and prompts, generator, loss, π_ref, the policy
                   (model, optimizer, version), selector, transport, dedup, role state, distillation, federated
  build_parts      builds them, seeded by `cfg.seed`, in the one order a run's random draws depend on
  build_node_loss  the node's loss as one losses.compose.Loss: the configured loss, `train.imitate`'s term and
                   `train.peer_token_floor`'s filter (build_parts adds the distillation term of a student)

node.node.Node builds its parts here and keeps them as its attributes, beside what it keeps across rounds
itself (the metrics log, held-out results, the round counter); its `parts` hands a round
node.round.parts.RoundParts of them.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from losses import build_loss_from_config
from losses.compose import Loss, as_loss
from losses.distill import with_distillation
from losses.imitation import with_imitation
from losses.peer_floor import with_peer_floor
from node.config import NodeConfig
from node.distill.mode import build_distill
from node.federated.mode import Federated, FederatedTasks
from node.generation.base import build_generator
from node.heterorl.state import build_role_state
from node.models.device import place
from node.models.load import load_model
from node.round.dedup import SeenGroups
from node.round.parts import PolicyState
from node.round.reference import build_reference
from node.round.select import SapoSelector
from node.round.train import build_optimizer
from node.tasks.source import PromptCache, TaskSource

if TYPE_CHECKING:
    from swarm.exchange.transport import Transport

log = logging.getLogger(__name__)


@dataclass
class NodeParts:
    """What build_parts builds (the names node.node.Node and node.round.parts.RoundParts give them)."""

    cfg: NodeConfig  # with train.* auto resolved by the memory plan
    model: Any
    tokenizer: Any
    precision: Any  # node.models.device's placement: autocast, float16 loss scale
    fingerprint: str
    vocab_size: int
    tasks: TaskSource  # node.federated.mode.FederatedTasks in federated mode
    prompt_of: PromptCache
    generator: Any
    loss_fn: Loss
    reference: Any  # π_ref of a KL penalty (None: the loss needs none)
    policy: PolicyState
    selector: SapoSelector
    transport: Transport | None
    peer_id: str
    seen_groups: SeenGroups
    hetero: Any = None  # node.heterorl.state's SamplerState / LearnerState
    distill: Any = None  # node.distill.mode.Distill
    federated: Federated | None = None
    memory_plan: Any = None  # node.round.sizing's plan when train.* was auto, else None


def build_node_loss(cfg: NodeConfig) -> Loss:
    """The configured loss with `train.imitate`'s term and `train.peer_token_floor`'s filter (either absent at 0)."""
    imitating = with_imitation(build_loss_from_config(cfg.loss), cfg.train.imitate, rows=cfg.train.imitate_rows)
    return as_loss(with_peer_floor(imitating, cfg.train.peer_token_floor, span=cfg.train.peer_floor_span))


def build_parts(cfg: NodeConfig, transport: Transport | None = None) -> NodeParts:
    """Every part of a node of config `cfg` (module docstring). Seeds `random` and torch with `cfg.seed` first;
    the order below is the order of the random draws a run reproduces (model, optimizer, selector, adapters)."""
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    loaded = load_model(cfg.model)
    model, tokenizer = loaded.model, loaded.tokenizer
    precision = place(model, cfg.train)  # train.device, autocast, gradient checkpointing
    tasks = FederatedTasks(cfg.tasks, cfg.federated.split) if cfg.federated else TaskSource(cfg.tasks)
    generator = build_generator(cfg.generation, model, tokenizer)
    loss = build_node_loss(cfg)
    reference = build_reference(model) if loss.needs_reference else None  # π_ref for a KL penalty: the initial weights
    policy = PolicyState(model, build_optimizer(model, cfg.train))  # what a round trains
    precision.attach(policy.optimizer)  # float16: skip overflowing steps, adapt the loss scale
    parts = NodeParts(cfg=cfg, model=model, tokenizer=tokenizer, precision=precision, fingerprint=loaded.fingerprint,
                      vocab_size=loaded.vocab_size, tasks=tasks,
                      prompt_of=PromptCache(tokenizer, tasks.system_prompt()), generator=generator, loss_fn=loss,
                      reference=reference, policy=policy, selector=SapoSelector(cfg.select, seed=cfg.seed),
                      transport=transport, peer_id=transport.peer_id if transport is not None else cfg.name,
                      seen_groups=SeenGroups(cfg.ingest.max_age_s + cfg.ingest.max_clock_skew_s))  # node.round.dedup
    if transport is not None:  # bundles are decoded under our own budget per completion (swarm.exchange.receive)
        transport.limit_completions(cfg.ingest.max_completion_tokens or cfg.generation.max_new_tokens)
    parts.hetero = build_role_state(parts)  # role sampler / learner: weight channel and bookkeeping
    distill = parts.distill = build_distill(parts)  # a teacher's score service, a student's requests (node.distill)
    if distill is not None and distill.student is not None:  # λ of the round, read at each call
        parts.loss_fn = with_distillation(loss, lambda: distill.coef, bounds=distill.bounds, signal=distill.signal)
    if cfg.federated is not None:
        print(tasks.describe(), flush=True)
        parts.federated = Federated(cfg.federated, model, swarm_id=cfg.swarm.swarm_id, transport=transport)
    plan_memory(parts)
    return parts


def plan_memory(parts: NodeParts) -> None:
    """Measure and fix `train.micro_batch_rows` / `train.gradient_checkpointing` when either is auto
    (node.round.sizing), into `parts.cfg` and `parts.memory_plan`; nothing when neither is."""
    cfg, g = parts.cfg, parts.cfg.generation
    if cfg.train.micro_batch_rows != "auto" and cfg.train.gradient_checkpointing != "auto":
        return
    from node.round.sizing import plan_memory as plan

    prompts = [parts.prompt_of(t) for t in parts.tasks.sample(0, min(g.prompts_per_round, 64))]
    longest = max(len(parts.tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts)
    step_rows = (cfg.select.local_groups + cfg.select.external_groups) * g.group_size
    reserve_fn = getattr(parts.generator, "reserve_bytes", None)  # the hf loop's caches; vLLM has taken its share
    reserve = reserve_fn(min(g.max_batch_sequences, g.prompts_per_round * g.group_size),
                         longest + g.max_new_tokens) if reserve_fn else 0
    memory = plan(parts.model, cfg.train, row_tokens=longest + g.max_new_tokens, completion_tokens=g.max_new_tokens,
                  step_rows=max(step_rows, 1), pad_id=parts.tokenizer.pad_token_id, reserve=reserve)
    parts.cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={
        "micro_batch_rows": memory.micro_batch_rows, "gradient_checkpointing": memory.checkpointing})})
    parts.memory_plan = memory
    log.info("%s: %s", cfg.name, memory.describe())
