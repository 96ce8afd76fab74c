"""A node's parts, built from its config: model, tasks, generator, loss, selector, transport, logs.

`Node` holds state across rounds (weights, optimizer, round counter, policy version, the pool of
external groups); a round reads only its `parts` (node.round.parts.RoundParts, built here for each
round); its `mode` picks the round function (node.runner): `node.round.loop.run_round()`
for a node that samples, shares and trains, `node.federated.round.run_federated_round()` in
federated mode, node.heterorl's `run_sampler_round()` / `run_learner_round()` for those roles.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from losses import build_loss_from_config
from losses.distill import with_distillation
from losses.imitation import with_imitation
from losses.peer_floor import with_peer_floor
from node.books import checkpoint
from node.books.metrics import EvalResult, MetricsLog
from node.config import NodeConfig
from node.distill.mode import build_distill
from node.federated.mode import Federated, FederatedTasks
from node.generation.base import build_generator
from node.heterorl.state import build_role_state
from node.models.device import place
from node.models.load import load_model
from node.round.dedup import SeenGroups
from node.round.parts import PolicyState, RoundParts
from node.round.reference import build_reference
from node.round.select import SapoSelector
from node.round.train import build_optimizer
from node.tasks.source import TaskSource, render_prompt

if TYPE_CHECKING:
    from swarm.exchange.transport import Transport

log = logging.getLogger(__name__)


class Node:
    def __init__(self, cfg: NodeConfig, out_dir: Path, *, transport: Transport | None = None,
                 clock: Callable[[], float] = time.time):
        self.cfg = cfg
        self.clock = clock  # the rounds' clock (node.round.parts.RoundParts.clock)
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if cfg.torch_threads:
            torch.set_num_threads(cfg.torch_threads)
        random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)

        loaded = load_model(cfg.model)
        self.model, self.tokenizer = loaded.model, loaded.tokenizer
        self.precision = place(self.model, cfg.train)  # train.device, autocast, gradient checkpointing
        self.fingerprint, self.vocab_size = loaded.fingerprint, loaded.vocab_size
        self.tasks = FederatedTasks(cfg.tasks, cfg.federated.split) if cfg.federated else TaskSource(cfg.tasks)
        self.generator = build_generator(cfg.generation, self.model, self.tokenizer)
        self.loss_fn = with_peer_floor(with_imitation(build_loss_from_config(cfg.loss), cfg.train.imitate,
                                                      rows=cfg.train.imitate_rows), cfg.train.peer_token_floor,
                                      span=cfg.train.peer_floor_span)
        # π_ref for a KL penalty (the loss says whether it needs one): the initial weights
        self.reference = build_reference(self.model) if getattr(self.loss_fn, "needs_reference", False) else None
        self.policy = PolicyState(self.model, build_optimizer(self.model, cfg.train))  # what a round trains
        self.precision.attach(self.optimizer)  # float16: skip overflowing steps, adapt the loss scale
        self.selector = SapoSelector(cfg.select, seed=cfg.seed)
        self.transport = transport
        self.peer_id = transport.peer_id if transport is not None else cfg.name
        self.seen_groups = SeenGroups(cfg.ingest.max_age_s + cfg.ingest.max_clock_skew_s)  # node.round.dedup
        if transport is not None:  # bundles are decoded under our own budget per completion (swarm.exchange.receive)
            transport.limit_completions(cfg.ingest.max_completion_tokens or cfg.generation.max_new_tokens)
        self.hetero = build_role_state(self)  # role sampler / learner: weight channel and bookkeeping
        self.distill = build_distill(self)  # a teacher's score service, a student's requests (node.distill)
        if self.distill is not None and self.distill.student is not None:  # λ of the round, read at each call
            self.loss_fn = with_distillation(self.loss_fn, lambda: self.distill.coef, bounds=self.distill.bounds,
                                             signal=self.distill.signal)
        self.federated = None
        if cfg.federated is not None:
            print(self.tasks.describe(), flush=True)
            self.federated = Federated(cfg.federated, self.model, swarm_id=cfg.swarm.swarm_id, transport=transport)
        self.log = MetricsLog(self.out_dir, cfg.name, cfg.metrics, run_config=cfg.model_dump(mode="json"),
                              identity={"name": cfg.name, "peer_id": transport.peer_id if transport else None,
                                        "model": cfg.model.spec})
        self._eval_set = self.tasks.eval_set()
        self._eval_labels = self.tasks.eval_labels()
        self._system_prompt = self.tasks.system_prompt()
        self._prompt_cache: dict = {}
        self.memory_plan = self._plan_memory()  # train.* auto: resolved once, here, into self.cfg
        self.next_round = 0
        self.start = "fresh start"  # or "resumed from <checkpoint>" (_resume)
        self.eval_before: float | None = None  # held-out accuracy before round 0
        self.last_eval: EvalResult | None = None  # the newest held-out evaluation
        self.eval_before_se: float | None = None
        self.eval_before_items: EvalResult | None = None  # per item, for paired before/after comparisons
        if cfg.checkpoint.resume:
            self._resume()
            if self.federated is not None:  # FedProx's θ_round: the restored adapter
                self.federated.anchor = [t.detach().clone() for t in self.federated.tensors]

    @property
    def parts(self) -> RoundParts:
        """What a round reads of this node (built anew for each round: a part replaced between rounds counts)."""
        return RoundParts(cfg=self.cfg, peer_id=self.peer_id, fingerprint=self.fingerprint, vocab_size=self.vocab_size,
                          tokenizer=self.tokenizer, tasks=self.tasks, prompt_of=self.prompt_of,
                          generator=self.generator, loss_fn=self.loss_fn, reference=self.reference,
                          policy=self.policy, selector=self.selector, seen_groups=self.seen_groups,
                          transport=self.transport, book=self, federated=self.federated, hetero=self.hetero,
                          distill=self.distill, clock=self.clock)

    @property
    def policy_version(self) -> int:
        return self.policy.version

    @policy_version.setter
    def policy_version(self, version: int) -> None:
        self.policy.version = version

    @property
    def optimizer(self):
        return self.policy.optimizer

    @optimizer.setter
    def optimizer(self, optimizer) -> None:
        self.policy.optimizer = optimizer

    @property
    def mode(self) -> str:
        """Which round function runs this node (node.runner.ROUND_FUNCTIONS)."""
        if self.federated is not None:
            return "federated"
        return "sapo" if self.cfg.role == "full" else self.cfg.role

    def _plan_memory(self):
        """Measure and fix `train.micro_batch_rows` / `train.gradient_checkpointing` when either is auto
        (node.round.memory); None when neither is."""
        cfg, g = self.cfg, self.cfg.generation
        if cfg.train.micro_batch_rows != "auto" and cfg.train.gradient_checkpointing != "auto":
            return None
        from node.round.memory import plan_memory

        prompts = [self.prompt_of(t) for t in self.tasks.sample(0, min(g.prompts_per_round, 64))]
        longest = max(len(self.tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts)
        step_rows = (cfg.select.local_groups + cfg.select.external_groups) * g.group_size
        reserve_fn = getattr(self.generator, "reserve_bytes", None)  # the hf loop's caches; vLLM has taken its share
        reserve = reserve_fn(min(g.max_batch_sequences, g.prompts_per_round * g.group_size),
                             longest + g.max_new_tokens) if reserve_fn else 0
        plan = plan_memory(self.model, cfg.train, row_tokens=longest + g.max_new_tokens,
                           completion_tokens=g.max_new_tokens, step_rows=max(step_rows, 1),
                           pad_id=self.tokenizer.pad_token_id, reserve=reserve)
        self.cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={
            "micro_batch_rows": plan.micro_batch_rows, "gradient_checkpointing": plan.checkpointing})})
        log.info("%s: %s", cfg.name, plan.describe())
        return plan

    # -- prompts -----------------------------------------------------------------------------
    def prompt_of(self, task) -> str:
        key = task.ref.dataset, task.ref.seed, task.ref.index, str(task.ref.config)
        if key not in self._prompt_cache:
            if len(self._prompt_cache) > 4096:
                self._prompt_cache.clear()
            self._prompt_cache[key] = render_prompt(self.tokenizer, task.question, self._system_prompt,
                                                   task.messages)
        return self._prompt_cache[key]

    # -- evaluation --------------------------------------------------------------------------
    def eval_due(self, round_: int) -> bool:
        every = self.cfg.eval.every
        return bool(every and self._eval_set) and ((round_ + 1) % every == 0 or round_ + 1 == self.cfg.rounds)

    @property
    def eval_size(self) -> int:
        """Held-out items (a file dataset may hold fewer than tasks.eval_size)."""
        return len(self._eval_set)

    def evaluate(self, progress=None) -> float:
        """Held-out accuracy: the fraction of fully correct sampled completions (`eval.samples` per item)."""
        return self.evaluate_items(progress).accuracy

    def evaluate_items(self, progress=None) -> EvalResult:
        """Held-out accuracy with its standard error over items (node.books.metrics.EvalResult); `progress`
        (node.books.progress.Progress over the held-out items) advances as batches of them are generated."""
        if not self._eval_set:
            return EvalResult([])
        prompts = [self.prompt_of(t) for t in self._eval_set]
        k = self.cfg.eval.samples
        own = progress is None and self.cfg.metrics.console  # shown when it takes long (node.books.progress)
        if own:
            from node.books.progress import Progress

            progress = Progress(f"[{self.cfg.name}] held-out eval", total=len(prompts), unit="items")
        try:
            result = self.generator.generate(prompts, n=k, **({"progress": progress} if progress is not None else {}))
        finally:
            if own:
                progress.close()
        scores = [self.tasks.score_group(t, [c.text for c in g]) for t, g in zip(self._eval_set, result.groups)]
        self.last_eval = EvalResult([sum(s >= 1.0 for s in row) / k for row in scores], [sum(row) / k for row in scores],
                                    self._eval_labels)
        return self.last_eval

    # -- checkpoints -------------------------------------------------------------------------
    @property
    def ckpt_dir(self) -> Path:
        return self.out_dir / "checkpoints"

    def checkpoint_due(self, round_: int) -> bool:
        return (round_ + 1) % self.cfg.checkpoint.every == 0 or round_ + 1 == self.cfg.rounds

    def save_checkpoint(self, round_: int) -> Path:
        extra = {"selector_rng": checkpoint.to_jsonable(self.selector.rng.getstate()), "model_spec": self.cfg.model.spec}
        return checkpoint.save(self.ckpt_dir, model=self.model, tokenizer=self.tokenizer,
                               optimizer=self.optimizer, round_=round_,
                               policy_version=self.policy_version, extra=extra,
                               keep=self.cfg.checkpoint.keep)

    def _resume(self) -> None:
        restored = checkpoint.restore(self.ckpt_dir, model=self.model, optimizer=self.optimizer)
        if restored is None:
            if (self.out_dir / "metrics.jsonl").is_file() and (self.out_dir / "metrics.jsonl").stat().st_size:
                log.warning("%s: fresh start from round 0: no checkpoint in %s, though metrics.jsonl holds rounds "
                            "of an earlier run (they are re-run)", self.cfg.name, self.ckpt_dir)
            return
        self.next_round = restored.round + 1
        self.policy_version = restored.policy_version
        self.generator.sync_weights(self.model, self.policy_version, force=True)  # vLLM holds a copy
        if "selector_rng" in restored.extra:
            self.selector.rng.setstate(checkpoint.from_jsonable(restored.extra["selector_rng"]))
        self.log.mark_resumed(restored.name, self.next_round)
        self.start = f"resumed from {restored.name}"
        log.warning("%s: resumed from checkpoint of round %d (policy v%d)",
                    self.cfg.name, restored.round, restored.policy_version)

    def close(self) -> None:
        self.log.close()
        if hasattr(self.generator, "close"):  # the vLLM backend runs an engine process
            self.generator.close()
        if self.federated is not None:
            self.federated.close()
        if self.hetero is not None:
            self.hetero.channel.close()
        if self.distill is not None:
            self.distill.close()
        if self.transport is not None:
            self.transport.shutdown()
