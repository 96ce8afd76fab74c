"""The composition root (node/assemble.py): a node's loss is one losses.compose.Loss whose parts the config names,
and its needs_reference (whether π_ref is built) is read from those parts."""

from __future__ import annotations

from losses.compose import Loss
from losses.imitation import ImitationTerm
from losses.peer_floor import PeerFloor
from node.assemble import build_node_loss
from node.config import load_config


def _cfg(**over):
    return load_config("examples/lab-swarm.yaml", over)


def test_the_node_loss_is_one_object_whose_parts_the_config_names():
    plain = build_node_loss(_cfg())
    assert isinstance(plain, Loss) and plain.terms == () and plain.filters == () and not plain.needs_reference
    full = build_node_loss(_cfg(**{"train.imitate": 0.5, "train.imitate_rows": "all", "train.peer_token_floor": 0.01,
                                   "train.peer_floor_span": "token"}))
    assert full.terms == (ImitationTerm(0.5, "all"),) and full.filters == (PeerFloor(0.01, "token"),)


def test_needs_reference_follows_the_base_loss_through_the_terms_and_filters():
    kl = build_node_loss(_cfg(**{"loss": {"name": "grpo", "beta": 0.05}, "train.imitate": 1.0,
                                 "train.peer_token_floor": 0.01}))
    assert kl.needs_reference and len(kl.terms) == 1 and len(kl.filters) == 1
    assert not build_node_loss(_cfg(**{"loss": {"name": "grpo", "beta": 0.0}, "train.imitate": 1.0})).needs_reference
