"""Tokenizer-agnostic rows, numerical safety, input validation and configuration errors."""

import math

import pytest
import torch
from pydantic import BaseModel, TypeAdapter
from torch.testing import assert_close

from losses import (
    LOSS_NAMES,
    FISConfig,
    GRPOConfig,
    LossConfig,
    LossInputs,
    behaviour_view,
    build_loss,
    build_loss_from_config,
)
from tests.unit.losses.test_losses_values import LOGP, MASK, R, batch, make_inputs

LN11 = math.log(1.1)


def unaligned_batch() -> LossInputs:
    """The values batch with row 1 re-tokenised: μ_t unknown (NaN), log μ(y) gives r = 1.1.

    log μ(y) = Σ_t log π − T_recv·ln 1.1 = −1.75 − 2 ln 1.1 (the sender may have had any
    number of tokens; only the receiver's T_recv = 2 enters).
    """
    beh = [[lp - math.log(r) for lp, r in zip(LOGP[0], R[0])], [float("nan")] * 3]
    return make_inputs(
        LOGP, beh, MASK, [1.0, -0.5], aligned=[True, False], beh_seq=[0.0, -1.75 - 2 * LN11]
    )


def test_behaviour_view_unaligned_row_uses_sequence_ratio():
    view = behaviour_view(unaligned_batch())
    # row 1: (Σ log π − log μ(y))/2 = ln 1.1 on both tokens, 0 on the padding
    assert_close(view.log_ratio[1], torch.tensor([LN11, LN11, 0.0]))
    assert_close(view.log_ratio[0], torch.log(torch.tensor(R[0])))
    # sequence-level: mean_t log μ := log μ(y)/T_recv = (−1.75 − 2 ln 1.1)/2
    assert_close(view.seq_logq[1], torch.tensor((-1.75 - 2 * LN11) / 2))
    assert_close(view.seq_logp, torch.tensor([-3.5 / 3, -0.875]))


def test_tis_on_unaligned_row():
    out = build_loss("tis")(unaligned_batch())
    # row 0 as in test_tis_value: −1; row 1: w = 1.1 on both tokens, −w·A = 0.55 → (−1 + 0.55)/2
    assert_close(out.loss, torch.tensor(-0.225))
    assert_close(out.metrics["is_weight_mean"], (1.5 + 1.0 + 0.5 + 1.1 + 1.1) / 5)


def test_gspo_on_unaligned_row():
    out = build_loss("gspo")(unaligned_batch())
    # s_1 = exp(mean log π − log μ(y)/2) = 1.1; A=−0.5: min(−0.55, −0.5002) → 0.55
    # row 0: s_0 = 0.75^(1/3) → −0.908560; total (−0.908560 + 0.55)/2
    assert_close(out.loss, torch.tensor((-(0.75 ** (1 / 3)) + 0.55) / 2))


ALL_CONFIGS = [{"name": n} for n in LOSS_NAMES] + [
    {"name": "f-tis", "g": 5.0, "filter": "authors-code"},
    {"name": "gepo", "eps_defensive": 0.5, "beta": 0.005},
    {"name": "gepo", "eps_defensive": 1.0},
    {"name": "grpo", "beta": 0.1, "norm": "dr"},
    {"name": "pg", "norm": "token"},
]


def extreme_inputs(logp_value: float, beh_value: float) -> LossInputs:
    """B=4, T=3: a normal row, a fully masked row, an unaligned row, a zero-advantage row;
    the last two are single-row groups; every token has log π = logp_value, log μ = beh_value."""
    logp = [[logp_value] * 3] * 4
    beh = [[beh_value] * 3] * 4
    mask = [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
    inputs = make_inputs(
        logp, beh, mask, [-1.0, 2.0, -0.5, 0.0],
        group_ids=[0, 0, 1, 2], aligned=[True, True, False, True],
        beh_seq=[0.0, 0.0, 3 * beh_value, 0.0], external=[False, True, True, False],
        ref=[[beh_value] * 3] * 4,
    )  # fmt: skip
    inputs.logp_old = inputs.logp_old + 30.0  # a badly stale π_old only moves kl_old
    return inputs


@pytest.mark.parametrize("cfg", ALL_CONFIGS, ids=lambda c: "-".join(f"{v}" for v in c.values()))
@pytest.mark.parametrize("logp_value, beh_value", [(-80.0, -0.1), (-0.1, -80.0), (-1e4, -1e-6)])
def test_no_nan_or_inf_in_extreme_cases(cfg, logp_value, beh_value):
    inputs = extreme_inputs(logp_value, beh_value)
    out = build_loss_from_config(cfg)(inputs)
    out.loss.backward()
    assert torch.isfinite(out.loss)
    assert bool(torch.isfinite(inputs.logp.grad).all())
    assert all(math.isfinite(v) for v in out.metrics.values()), out.metrics
    assert out.metrics["tokens"] == 6.0
    assert_close(inputs.logp.grad[1], torch.zeros(3))  # the fully masked row gets no gradient


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_padding_content_is_never_read(name):
    clean = batch()
    dirty = batch()
    with torch.no_grad():
        dirty.logp[1, 2] = float("nan")
        dirty.logp_old[1, 2] = float("inf")
    dirty.logp_beh[1, 2] = float("-inf")
    a, b = build_loss(name)(clean), build_loss(name)(dirty)
    b.loss.backward()
    assert_close(a.loss, b.loss)
    assert a.metrics == b.metrics
    assert bool(torch.isfinite(dirty.logp.grad).all())


def test_bool_mask_equals_float_mask():
    inputs = batch()
    out_float = build_loss("f-tis")(inputs)
    inputs.mask = inputs.mask.bool()
    assert_close(build_loss("f-tis")(inputs).loss, out_float.loss)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("logp_beh", torch.zeros(2, 4), "logp_beh must have shape"),
        ("advantages", torch.zeros(3), "advantages must have shape"),
        ("beh_aligned", torch.ones(2), "beh_aligned must be a bool"),
        ("is_external", torch.zeros(2, dtype=torch.long), "is_external must be a bool"),
        ("group_ids", torch.zeros(2), "group_ids must be an integer"),
        ("advantages", torch.tensor([1.0, float("nan")]), "advantages holds NaN"),
        ("logp_beh", torch.full((2, 3), float("nan")), "logp_beh holds NaN"),
    ],
)
def test_bad_inputs_raise_value_error_naming_the_field(field, value, message):
    inputs = batch()
    setattr(inputs, field, value)
    with pytest.raises(ValueError, match=message):
        build_loss("tis")(inputs)


def test_nan_logp_on_a_completion_token_raises():
    inputs = batch()
    with torch.no_grad():
        inputs.logp[0, 1] = float("nan")
    with pytest.raises(ValueError, match="logp holds NaN"):
        build_loss("grpo")(inputs)


def test_unaligned_row_needs_finite_sequence_logprob():
    inputs = unaligned_batch()
    inputs.logp_beh_seq = torch.tensor([0.0, float("nan")])
    with pytest.raises(ValueError, match="logp_beh_seq"):
        build_loss("gspo")(inputs)


def test_grpo_beta_without_reference_raises():
    with pytest.raises(ValueError, match="logp_ref"):
        build_loss("grpo", beta=0.05)(batch())


@pytest.mark.parametrize(
    "name, cfg, message",
    [
        ("nope", {}, "unknown loss 'nope'"),
        ("grpo", {"eps_low": 1.5}, "eps_low"),
        ("grpo", {"norm": "sequence"}, "norm"),
        ("grpo", {"epsilon": 0.2}, "epsilon: Extra inputs are not permitted"),
        ("pg", {"beta": 0.1}, "beta"),
        ("f-tis", {"g": -1.0}, "g: Input should be greater than or equal to 0"),
        ("f-tis", {"filter": "max"}, "filter"),
        ("tis", {"C": 0.5}, "C"),
        ("tis", {"g": 5.0}, "g only applies to f-nois, f-vis, f-tis"),
        ("vis", {"C": 3.0}, "C only applies to tis and f-tis"),
        ("gspo", {"eps_high": -0.1}, "eps_high"),
        ("gepo", {"eps_defensive": 1.5}, "eps_defensive"),
        ("gepo", {"beta": -1.0}, "beta"),
    ],
)
def test_bad_config_raises_value_error_naming_it(name, cfg, message):
    with pytest.raises(ValueError, match=message):
        build_loss(name, **cfg)


def test_loss_config_parses_from_dict():
    adapter = TypeAdapter(LossConfig)
    cfg = adapter.validate_python({"name": "f-tis", "g": 5, "filter": "authors-code"})
    assert isinstance(cfg, FISConfig) and cfg.g == 5.0 and cfg.filter == "authors-code" and cfg.C == 2.0
    assert isinstance(adapter.validate_python({"name": "grpo"}), GRPOConfig)
    # the built function is the same loss as build_loss with the same keywords
    a = build_loss_from_config(cfg)(batch()).loss
    b = build_loss("f-tis", g=5, filter="authors-code")(batch()).loss
    assert_close(a, b)


def test_loss_config_embeds_in_a_parent_model():
    class NodeLike(BaseModel):
        loss: LossConfig

    parsed = NodeLike.model_validate({"loss": {"name": "gepo", "eps_defensive": 0.3}})
    assert parsed.loss.name == "gepo" and parsed.loss.eps_defensive == 0.3
    with pytest.raises(ValueError):
        NodeLike.model_validate({"loss": {"name": "gepo", "g": 5}})


def test_build_from_mapping_and_every_name_has_a_config():
    for name in LOSS_NAMES:
        fn = build_loss_from_config({"name": name})
        assert torch.isfinite(fn(batch()).loss)
    with pytest.raises(ValueError, match="needs a 'name'"):
        build_loss_from_config({"g": 5})
    with pytest.raises(ValueError, match="not a loss config"):
        build_loss_from_config(42)
