"""Federated mode (PubSwap paper; docs/ARCHITECTURE.md): private client data, LoRA adapters averaged every τ
rounds without a server, and the FedAvg-GRPO / FedProx / PubSwap algorithms.

  private round   GRPO on B prompts drawn from this client's private set (a Dirichlet(α) share of
                  the task families, node.federated.split); nothing is published or gathered.
  public round    (PubSwap, every τ_swap-th round) public step k: the same B public prompts on every
                  node, drawn from the shared public set with a seed of (split seed, k); K responses
                  each, published as ordinary rollout records whose `round` is k; each node builds
                  its groups by the Balanced or Random rule (node.federated.pubswap) from its own
                  and peers' responses to step k. k is the node's next step, or the newest step a
                  peer has published when that is ahead: a client that lags or joins late catches up.
  average         after every τ-th round: FedIT averaging of the LoRA tensors (A and B separately)
                  with whichever peers join in time (swarm.weights.averaging, on the averager the node's
                  transport opens: Transport.open_averager), optionally weighted by the
                  samples trained since the last average; on success the optimizer state is reset
                  (as the paper) and the new weights are synced into the generator.
  FedProx         adds μ/2·‖θ − θ_round‖² over the LoRA tensors to every step's loss, θ_round =
                  the adapter at the last averaging boundary (the averaged one when it succeeded).

The GRPO step of the examples is the paper's (eq. 2 as its VERL setup runs it): loss `grpo` with
`ratio: old` (a donor's response is treated as on-policy: the ratio is against this client's own
π_old), two gradient epochs per step (train.epochs), ε 0.2 / 0.25, KL 1e-4 to the base model.
Departure: there is no server; each client applies the Balanced/Random rule to the peers'
responses that reached it within federated.public_wait_s.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from node.federated import split as fedsplit
from node.federated.config import FederatedConfig, SplitConfig
from node.federated.pubswap import Response, balanced, is_public_round, random_draw
from node.round.groups import SELF, Group, advantages
from node.round.select import Selection
from node.tasks import streams
from node.tasks.config import TaskConfig
from node.tasks.source import Task, TaskSource, regenerate
from protocols.records import TaskRef

if TYPE_CHECKING:
    from swarm.exchange.transport import Transport


class FederatedTasks(TaskSource):
    """Private items of this client, the shared public set, and the global held-out set.

    Private items, public items and held-out items come from three disjoint streams
    (node.tasks.streams), and no private item asks a public or held-out question, nor a public
    item a held-out one: a public prompt is never something a client also trains on privately.
    """

    def __init__(self, cfg: TaskConfig, split: SplitConfig):
        super().__init__(cfg)
        self.split = split
        self.counts = fedsplit.dirichlet_counts(len(cfg.datasets), split.clients, split.alpha, split.private_size,
                                                split.seed)
        pub, priv = streams.public_seed(split.seed), streams.private_seed(split.seed)
        self.public_set = [self.excluded.first_allowed(self._maker(f, pub), i)
                           for f, i in fedsplit.public_items(len(cfg.datasets), split.public_size)]
        private_excluded = streams.Excluded(self.excluded.questions | {t.question for t in self.public_set})
        self.private = [private_excluded.first_allowed(self._maker(f, priv), i)
                        for f, i in fedsplit.private_items(self.counts[split.client], split.client, split.private_size)]

    def _maker(self, family: int, seed: int):
        spec = self.cfg.datasets[family]
        return lambda index: regenerate(TaskRef(spec.name, dict(spec.config), seed, index))

    def sample(self, round_: int, n: int) -> list[Task]:
        """B items of this client's private set (without replacement within a round)."""
        rng = random.Random(f"{self.cfg.seed}/{round_}")
        return rng.sample(self.private, n) if n <= len(self.private) else rng.choices(self.private, k=n)

    def public(self, step: int, n: int) -> list[Task]:
        """Public step `step`'s prompts: the same on every node (seeded by split seed and step index)."""
        rng = random.Random(f"{self.split.seed}/public/{step}")
        return rng.sample(self.public_set, n) if n <= len(self.public_set) else rng.choices(self.public_set, k=n)

    def is_public(self, ref: TaskRef) -> bool:
        """Whether a task is one of the shared public set's (its stream is the split's public stream)."""
        return ref.seed == streams.public_seed(self.split.seed)

    def family_names(self) -> list[str]:
        names = [s.name for s in self.cfg.datasets]
        return [f"{n}[{i}]" if names.count(n) > 1 else n for i, n in enumerate(names)]

    def describe(self) -> str:
        return fedsplit.format_split(self.family_names(), self.counts, self.split.alpha, self.split.public_size) + \
            f"\nthis node is client {self.split.client}"


def task_key(ref: TaskRef) -> tuple:
    return ref.dataset, str(sorted(ref.config.items())), ref.seed, ref.index


def adapter_tensors(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The LoRA A and B matrices (peft names them lora_A / lora_B), in a fixed order."""
    return [p for n, p in model.named_parameters() if "lora_" in n and p.requires_grad]


@dataclass
class PubSwapStats:
    """What one public step's aggregation did (metrics) and which peers' groups it could not use (drops)."""

    peer_groups: int = 0  # peers' groups of this step's public prompts that joined a pool
    replaced: int = 0  # own responses swapped for peers' (Balanced) / peers' responses drawn (Random)
    drops: Counter = field(default_factory=Counter)  # not_public, unaligned

    def metrics(self) -> dict[str, int]:
        return {"pubswap_peer_groups": self.peer_groups, "pubswap_replaced": self.replaced}


def build_public_groups(local: list[Group], received: list[Group], cfg: FederatedConfig, *, own_id: str,
                        round_: int, rng: random.Random, mode: str, drop_zero_advantage: bool
                        ) -> tuple[Selection, PubSwapStats]:
    """Our training groups of a public round from our groups and peers' groups of the same prompts."""
    stats = PubSwapStats()
    wanted = {task_key(g.task.ref) for g in local}
    pools: dict[tuple, list[Response]] = {k: [] for k in wanted}
    for g in received:
        key = task_key(g.task.ref)
        if g.round != round_ or key not in wanted:
            stats.drops["not_public"] += 1
        elif not g.aligned:  # federated nodes share one base model; another tokenizer cannot be a donor here
            stats.drops["unaligned"] += 1
        else:
            pools[key] += [Response(c, r, g.source, i) for i, (c, r) in enumerate(zip(g.completions, g.rewards))]
            stats.peer_groups += 1
    groups, dropped = [], 0
    for g in local:
        key = task_key(g.task.ref)
        own = [Response(c, r, own_id, i) for i, (c, r) in enumerate(zip(g.completions, g.rewards))]
        if cfg.pubswap.rule == "balanced":
            built = balanced(own, own + pools[key], own_id, rng)
        else:
            built = random_draw(own + pools[key], len(own), own_id, f"{cfg.split.seed}/{round_}/{key}")
        stats.replaced += built.replaced
        rewards = [r.reward for r in built.responses]
        group = Group(g.task, [r.completion for r in built.responses], rewards, advantages(rewards, mode),
                      source=SELF, round=round_, policy_version=g.policy_version)
        if drop_zero_advantage and not group.informative:
            dropped += 1
            continue
        groups.append(group)
    return Selection(groups, len(groups), 0, dropped), stats


class Federated:
    """A node's federated state: algorithm, averaging partner search, FedProx anchor, sample count."""

    def __init__(self, cfg: FederatedConfig, model: torch.nn.Module, *, swarm_id: str,
                 transport: Transport | None = None, averager=None):
        self.cfg = cfg
        self.tensors = adapter_tensors(model)
        if not self.tensors:
            raise ValueError("federated mode averages LoRA adapters, but the model has no lora_ parameters")
        self.anchor = [t.detach().clone() for t in self.tensors]  # θ_round for FedProx
        self.samples = 0  # rows trained since the last averaging boundary
        self.next_step = 0  # index of our next public step (PubSwap)
        self.averager = averager
        if self.averager is None and transport is not None:  # None on a transport without a DHT (the in-memory twin)
            self.averager = transport.open_averager(
                self.tensors, prefix=f"{swarm_id}_lora".replace(".", "_"), target_group_size=cfg.split.clients,
                min_group_size=cfg.min_group_size, matchmaking_time_s=cfg.matchmaking_time_s,
                request_timeout_s=min(3.0, cfg.matchmaking_time_s / 2), allreduce_timeout_s=cfg.allreduce_timeout_s)

    def public_round(self, round_: int) -> bool:
        return self.cfg.algorithm == "pubswap" and is_public_round(round_, self.cfg.pubswap.tau_swap)

    def public_step(self, newest_seen: int | None) -> int:
        """This public step's index: our next one, or the swarm's newest when peers are ahead (we catch
        up instead of answering prompts nobody else answers any more)."""
        step = self.next_step if newest_seen is None else max(self.next_step, newest_seen)
        self.next_step = step + 1
        return step

    def average_due(self, round_: int) -> bool:
        return (round_ + 1) % self.cfg.tau == 0

    def proximal(self):
        """FedProx regularizer μ/2·Σ‖θ − θ_round‖² (a closure for train_step), or None."""
        if self.cfg.algorithm != "fedprox" or self.cfg.prox_mu == 0:
            return None
        mu = self.cfg.prox_mu

        def reg() -> torch.Tensor:
            return 0.5 * mu * sum((t - a).pow(2).sum() for t, a in zip(self.tensors, self.anchor))

        return reg

    def average(self) -> dict:
        """One averaging boundary: FedIT with whoever joins; metrics for the round's log line."""
        weight = float(max(1, self.samples)) if self.cfg.weight_by_samples else 1.0
        if self.averager is None:
            out = {"avg_averaged": False, "avg_group_size": 1, "avg_bytes": 0, "avg_drift": None, "avg_s": 0.0,
                   "avg_error": "no swarm"}
        else:
            res = self.averager.average(self.tensors, weight=weight, timeout=self.cfg.average_timeout_s)
            out = {"avg_averaged": res.averaged, "avg_group_size": res.group_size, "avg_bytes": res.bytes,
                   "avg_drift": res.drift, "avg_s": res.seconds, "avg_error": res.error}
        out["avg_weight"] = weight
        self.anchor = [t.detach().clone() for t in self.tensors]
        self.samples = 0
        return out

    def close(self) -> None:
        if self.averager is not None and hasattr(self.averager, "shutdown"):
            self.averager.shutdown()
