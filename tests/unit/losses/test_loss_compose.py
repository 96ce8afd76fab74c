"""A node's loss as one object (losses/compose.py): filters before the base and the filtered terms, the own-row
terms on the step's inputs, and one `needs_reference` read from the parts."""

from __future__ import annotations

import torch

from losses.base import LossInputs
from losses.compose import Loss
from losses.imitation import ImitationTerm, with_imitation
from losses.peer_floor import PeerFloor, with_peer_floor
from losses.registry import build_loss


def _inputs() -> LossInputs:
    logp = torch.tensor([[-0.5, -9.0, -0.2], [-0.3, -0.4, -0.6]], requires_grad=True)
    old = logp.detach().clone()
    return LossInputs(logp=logp, logp_old=old, logp_beh=old, logp_beh_seq=old.sum(1),
                      beh_aligned=torch.ones(2, dtype=torch.bool), mask=torch.ones(2, 3),
                      advantages=torch.tensor([1.0, -1.0]), group_ids=torch.zeros(2, dtype=torch.long),
                      is_external=torch.tensor([True, False]))


def test_the_floor_applies_to_every_filtered_term_whatever_the_order_they_were_added_in():
    # row 0 is a peer's; its token 1 (π_old = e^-9) is below the floor, and so (span rest) is token 2
    for fn in (with_peer_floor(with_imitation(build_loss("f-tis"), 1.0), 0.01),
               with_imitation(with_peer_floor(build_loss("f-tis"), 0.01), 1.0)):
        x = _inputs()
        out = fn(x)
        out.loss.backward()
        assert x.logp.grad[0, 1:].tolist() == [0.0, 0.0]  # neither the base nor the imitation term pushes them
        assert x.logp.grad[0, 0] != 0  # the token before them still trains
        assert out.metrics["floored_share_external"] == 2 / 3


class _Seen:
    """A term that records the logp it was given (grad-carrying or not)."""

    needs_reference = False

    def __init__(self, filtered: bool):
        self.filtered, self.seen = filtered, None

    def __call__(self, inputs):
        self.seen = inputs.logp
        return inputs.logp.sum() * 0, {"seen": 1.0}


def test_an_unfiltered_term_sees_the_step_inputs_and_a_filtered_one_the_floored():
    own, peers = _Seen(filtered=False), _Seen(filtered=True)
    x = _inputs()
    Loss(build_loss("f-tis"), terms=(peers, own), filters=(PeerFloor(0.01),))(x)
    assert own.seen is x.logp
    assert peers.seen is not x.logp  # torch.where's floored copy


def test_needs_reference_comes_from_the_base_or_a_term():
    kl = build_loss("grpo", beta=0.1)
    assert Loss(kl, terms=(ImitationTerm(1.0),), filters=(PeerFloor(0.01),)).needs_reference
    assert not Loss(build_loss("f-tis"), terms=(ImitationTerm(1.0),)).needs_reference
    wants = _Seen(filtered=True)
    wants.needs_reference = True
    assert Loss(build_loss("f-tis"), terms=(wants,)).needs_reference


def test_the_sum_and_metrics_are_the_base_then_filtered_terms_then_filters_then_own_terms():
    x = _inputs()
    base = build_loss("f-tis")
    fn = Loss(base, terms=(_Seen(filtered=False), ImitationTerm(0.5)), filters=(PeerFloor(0.01),))
    out = fn(x)
    keys = list(out.metrics)
    assert keys.index("imitation_share_external") < keys.index("floored_share_external") < keys.index("seen")
    assert set(base(x).metrics) <= set(keys[:keys.index("imitation_share_external")])
