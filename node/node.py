"""A node's state across rounds, on the parts node.assemble builds from its config.

`Node` holds its parts (node.assemble.NodeParts: model, tasks, generator, loss, selector, transport, …) as its
attributes, and what lives across rounds itself: the metrics log, held-out results, the round counter and the
policy version (its `policy`), restored from a checkpoint on resume. A round reads only its `parts`
(node.round.parts.RoundParts, built here for each round, with the node as its book); its `mode` picks the round
function (node.runner): `node.round.loop.run_round()` for a node that samples, shares and trains,
`node.federated.round.run_federated_round()` in federated mode, node.heterorl's `run_sampler_round()` /
`run_learner_round()` for those roles.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from node.assemble import NodeParts, build_parts
from node.books import checkpoint
from node.books.metrics import EvalResult, MetricsLog
from node.config import NodeConfig
from node.round.parts import RoundParts

if TYPE_CHECKING:
    from swarm.exchange.transport import Transport

log = logging.getLogger(__name__)


class Node:
    def __init__(self, cfg: NodeConfig, out_dir: Path, *, transport: Transport | None = None,
                 clock: Callable[[], float] = time.time):
        self.clock = clock  # the rounds' clock (node.round.parts.RoundParts.clock)
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        built = build_parts(cfg, transport)
        for f in dataclasses.fields(NodeParts):  # node.model, node.loss_fn, …: ops and bench read them
            setattr(self, f.name, getattr(built, f.name))
        self.log = MetricsLog(self.out_dir, cfg.name, cfg.metrics, run_config=cfg.model_dump(mode="json"),
                              identity={"name": cfg.name, "peer_id": transport.peer_id if transport else None,
                                        "model": cfg.model.spec})
        self._eval_set = self.tasks.eval_set()
        self._eval_labels = self.tasks.eval_labels()
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
