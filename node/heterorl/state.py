"""A role's state on a node (built by node.assemble for role sampler or learner): its weight channel and bookkeeping.

    SamplerState   follows the configured learners' weights: loads the newest verified version into the
                   model (and the generator: vLLM reloads), so every record it samples carries that version
    LearnerState   publishes its weights (at start and every `publish_every` steps), holds incoming records
                   in the delay line (ingest.delay), and counts what the staleness bound drops

Both need a swarm: the channel lives on the node's transport, which opens it (Transport.open_weights: the
in-memory twin of swarm.weights.channel in tests and benches, swarm.weights.hivemind on a real one).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING, Any, Protocol

from node.config import ConfigError, NodeConfig
from node.heterorl.weights import WeightsRejected, apply_weights, export_weights, weights_format
from node.round.delay import DelayLine
from swarm.weights.channel import WeightChannel, WeightLimits

if TYPE_CHECKING:
    from node.round.parts import RoundParts
    from swarm.exchange.transport import Transport

log = logging.getLogger(__name__)


class RoleNode(Protocol):
    """What building a role's state reads (node.assemble builds it with the node's NodeParts; a round hands its
    node.round.parts.RoundParts, which has the same names)."""

    cfg: NodeConfig
    transport: Transport | None  # None: no swarm
    model: Any  # the torch model the weights are exported from / loaded into
    hetero: Any  # this module's SamplerState / LearnerState, or None


def open_channel(node: RoleNode, follow: list[str]) -> WeightChannel:
    """The weight channel the node's transport opens (swarm.exchange.transport.Transport.open_weights)."""
    h = node.cfg.heterorl
    limits = WeightLimits(max_bytes=h.max_weight_bytes, max_clock_skew_s=node.cfg.swarm.max_clock_skew_s)
    return node.transport.open_weights(follow, fmt=weights_format(node.model), limits=limits, keep=h.keep_versions,
                                       poll_interval_s=h.poll_interval_s, fetch_timeout_s=h.fetch_timeout_s,
                                       ttl_s=h.announce_ttl_s)


def build_role_state(node: RoleNode):
    """SamplerState / LearnerState for the node's role; None for role full, or without a swarm (`swarm eval`
    builds a node that runs no round; a round then raises through `role_state`)."""
    role = node.cfg.role
    if role == "full" or node.transport is None:
        return None
    return SamplerState(node) if role == "sampler" else LearnerState(node)


def role_state(node: RoleNode):
    """The node's role state, or ConfigError (one line, exit 2) when it has none: no swarm to work in."""
    if node.hetero is None:
        raise ConfigError(f"role {node.cfg.role} needs a swarm: set swarm.enabled or pass --initial-peers")
    return node.hetero


class SamplerState:
    def __init__(self, node: RoleNode):
        if not node.cfg.heterorl.follow:
            raise ConfigError("role sampler needs heterorl.follow: the learner's peer id (it prints it at start)")
        self.channel = open_channel(node, node.cfg.heterorl.follow)
        self.drops: Counter = Counter()
        self.learner: str | None = None  # whose weights the model holds (None: its own initial weights)

    def follow(self, parts: RoundParts) -> dict[str, Any]:
        """Load the newest verified weights, if any arrived; returns this round's weight metrics."""
        update = self.channel.take()
        self.drops.update(self.channel.take_drops())
        out: dict[str, Any] = {"weights_loaded": False}
        if update is not None:
            try:
                if not update.relabel:  # relabel: the weights we hold, under the learner's new version
                    apply_weights(parts.model, update.data, update.format)
            except WeightsRejected as exc:
                self.drops[exc.reason] += 1
                log.warning("weights v%d from %s rejected: %s", update.version, update.learner[:12], exc)
            else:
                parts.policy.version = update.version
                parts.generator.sync_weights(parts.model, update.version, force=True)
                self.learner = update.learner
                out.update(weights_loaded=True, weights_bytes=len(update.data),
                           weights_latency_s=round(update.latency_s, 3))
        out.update(weights_version=parts.policy.version, weights_learner=self.learner)
        return out

    def take_drops(self) -> dict[str, int]:
        drops, self.drops = self.drops, Counter()
        return {f"weights_{k}": v for k, v in drops.items()}


class LearnerState:
    def __init__(self, node: RoleNode):
        self.channel = open_channel(node, [])
        self.delay: DelayLine = DelayLine(node.cfg.ingest.delay)
        self.published: int | None = None  # version of the weights we announced last
        self.accept_from = frozenset(node.cfg.heterorl.accept_from)

    def publish_due(self, parts: RoundParts) -> bool:
        if self.published is None:
            return True
        version = parts.policy.version
        return version - self.published >= parts.cfg.heterorl.publish_every or version < self.published

    def publish(self, parts: RoundParts) -> dict[str, Any]:
        """Announce and serve our current weights; returns metrics."""
        data = export_weights(parts.model)
        ann = self.channel.publish(parts.policy.version, data, weights_format(parts.model))
        self.published = parts.policy.version
        return {"weights_published": ann.version, "weights_bytes": ann.nbytes}
