"""losses/peer_floor.py (`train.peer_token_floor`, `train.peer_floor_span`): a peer's tokens the node's own policy
would not write get no gradient; values and the node's own rows are untouched."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from losses import build_loss
from losses.imitation import with_imitation
from losses.peer_floor import floor_peer_tokens, with_peer_floor
from node.round.config import TrainConfig
from tests.unit.losses.test_losses_values import make_inputs

L = math.log
# row 0: ours, with a token far below the floor; row 1: a peer's, its 2nd token below the floor;
# row 2: a peer's, every token plausible (the last position of row 2 is padding)
LOGP = [[L(0.5), L(0.001), L(0.4), L(0.6)], [L(0.5), L(0.001), L(0.4), L(0.6)], [L(0.5), L(0.2), L(0.9), 0.0]]
MASK = [[1.0] * 4, [1.0] * 4, [1.0, 1.0, 1.0, 0.0]]
BEH = [[-30.0] * 4, [-30.0] * 4, [L(0.5), L(0.2), L(0.9), 0.0]]  # row 1 claims a tiny μ: w = C under tis
ADV = [1.0, 1.0, 0.5]
EXTERNAL = [False, True, True]


def _inputs():
    return make_inputs(LOGP, BEH, MASK, ADV, group_ids=[0, 1, 2], external=EXTERNAL)


def _grad(fn):
    inputs = _inputs()
    out = fn(inputs)
    out.loss.backward()
    return out, inputs.logp.grad


def test_the_floor_takes_a_peers_implausible_token_and_by_default_the_rest_of_its_row():
    _, rest = floor_peer_tokens(_inputs(), 0.01)
    _, token = floor_peer_tokens(_inputs(), 0.01, span="token")
    assert rest.tolist() == [[False] * 4, [False, True, True, True], [False] * 4]
    assert token.tolist() == [[False] * 4, [False, True, False, False], [False] * 4]


@pytest.mark.parametrize("loss", ["f-tis", "pg", "nois"])
@pytest.mark.parametrize("span", ["rest", "token"])
def test_values_are_unchanged_own_rows_and_plausible_tokens_keep_their_gradient(loss, span):
    base, g_base = _grad(build_loss(loss))
    floored, g = _grad(with_peer_floor(build_loss(loss), 0.01, span=span))
    assert_close(floored.loss, base.loss)  # the same loss value: only gradients are taken
    assert_close(g[0], g_base[0])  # our own row, its implausible token included
    assert_close(g[2], g_base[2])  # a peer's row the node would write
    assert bool((g_base[1] != 0).all())  # without the floor the peer's implausible text trains
    taken = [1, 2, 3] if span == "rest" else [1]
    assert bool((g[1, taken] == 0).all())
    kept = [i for i in range(4) if i not in taken]
    assert_close(g[1, kept], g_base[1, kept])
    assert floored.metrics["floored_share_external"] == pytest.approx(len(taken) / 7)  # of the peers' 7 tokens
    for key, value in base.metrics.items():
        assert floored.metrics[key] == pytest.approx(value), key


def test_the_imitation_term_is_floored_too():
    lam_only = with_imitation(lambda inputs: build_loss("f-tis")(inputs), 1.0)
    _, g_base = _grad(lam_only)
    _, g = _grad(with_peer_floor(lam_only, 0.01))
    assert bool((g_base[1, 1:] != 0).all()) and bool((g[1, 1:] == 0).all())
    assert_close(g[2], g_base[2])


def test_off_is_the_loss_itself_a_reference_need_is_kept_and_bad_values_are_refused():
    base = build_loss("f-tis")
    assert with_peer_floor(base, 0.0) is base
    assert with_peer_floor(build_loss("grpo", beta=0.1), 0.01).needs_reference
    assert not with_peer_floor(base, 0.01).needs_reference
    for bad in (1.0, -0.1):
        with pytest.raises(ValueError):
            TrainConfig(peer_token_floor=bad)
    with pytest.raises(ValueError):
        with_peer_floor(base, 0.01, span="row")


def test_no_peer_rows_no_change():
    inputs = make_inputs(LOGP, BEH, MASK, ADV, group_ids=[0, 1, 2], external=[False] * 3)
    floored, low = floor_peer_tokens(inputs, 0.5)
    assert not bool(low.any()) and floored.logp.requires_grad
    out = with_peer_floor(build_loss("f-tis"), 0.5)(inputs)
    assert out.metrics["floored_share_external"] == 0.0
    assert torch.isfinite(out.loss)
