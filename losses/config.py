"""Every loss's config class, the `LossConfig` union chosen by `name`, and nothing that needs torch.

A node's YAML `loss: {name: f-tis, g: 5}` is validated against `LossConfig`, a pydantic union
discriminated by `name`; `losses.registry` maps each name to its pure function. A name holding a
colon is a loss of the user's own by import path (`name: mypkg.losses:my_loss` or
`name: path/to/file.py:my_loss`, every other key a keyword argument: `CustomLossConfig`,
resolved by `losses.custom`). These classes live apart from the functions so that reading or
validating a config never imports torch (nor the user's module).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    model_validator,
)

NormField = Field(
    "seq",
    description="seq: mean over each sequence's tokens, then over sequences (GRPO); "
    "token: mean over all tokens of the batch (DAPO); dr: token sum / (B·max_len) (Dr.GRPO).",
)
MaxLenField = Field(
    None,
    ge=1,
    le=1_000_000,
    description="Dr.GRPO denominator length (the generation budget, e.g. max_new_tokens); "
    "None uses the longest completion of the whole step batch. Only read when norm = dr.",
)

FISName = Literal["nois", "vis", "tis", "f-nois", "f-vis", "f-tis"]


@dataclass(frozen=True)
class FISVariant:
    ratio: Literal["self", "behaviour"]  # R = exp(logp − sg logp), or r against μ (vis)
    truncate: bool  # multiply by w = sg(min(r, C))
    filtered: bool  # negative-advantage filter


VARIANTS: dict[str, FISVariant] = {
    "nois": FISVariant("self", truncate=False, filtered=False),
    "vis": FISVariant("behaviour", truncate=False, filtered=False),
    "tis": FISVariant("self", truncate=True, filtered=False),
    "f-nois": FISVariant("self", truncate=False, filtered=True),
    "f-vis": FISVariant("behaviour", truncate=False, filtered=True),
    "f-tis": FISVariant("self", truncate=True, filtered=True),
}


class GRPOConfig(BaseModel):
    """GRPO with a token-level ratio against the behaviour policy, clip-higher and optional k3 KL."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Literal["grpo"] = Field("grpo", description="Loss name.")
    eps_low: float = Field(0.2, ge=0.0, le=1.0, description="Lower clip: r ≥ 1 − eps_low.")
    eps_high: float = Field(
        0.28, ge=0.0, le=10.0, description="Upper clip: r ≤ 1 + eps_high (DAPO clip-higher 0.28)."
    )
    norm: Literal["seq", "token", "dr"] = NormField
    max_len: int | None = MaxLenField
    ratio: Literal["behaviour", "old"] = Field(
        "behaviour",
        description="behaviour: r = π_θ/μ (the sampler's policy); old: r = π_θ/π_old, every row treated as "
        "on-policy (SAPO's and PubSwap's GRPO).",
    )
    beta: float = Field(
        0.0,
        ge=0.0,
        le=10.0,
        description="Weight of the k3 KL to the reference policy (the initial weights; the node scores it); 0 = off.",
    )
    dual_clip: float | None = Field(
        3.0,
        gt=1.0,
        le=1e4,
        description="Dual-clip PPO (Ye et al. 2020): where A < 0 the loss is capped at dual_clip·|A|, so no token "
        "gets a gradient weight above it however a peer's claimed μ sets π_θ/μ (losses/grpo.py); null = GRPO's "
        "unbounded side.",
    )


class PGConfig(BaseModel):
    """Plain policy gradient −log π_θ·A (DASH)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Literal["pg"] = Field("pg", description="Loss name.")
    norm: Literal["seq", "token", "dr"] = NormField
    max_len: int | None = MaxLenField


class FISConfig(BaseModel):
    """One of nois / vis / tis / f-nois / f-vis / f-tis (F-TIS paper, Yao et al. 2025)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: FISName = Field(description="Which member of the family.")
    eps_low: float = Field(0.2, ge=0.0, le=1.0, description="Lower clip of the surrogate: 1 − eps_low.")
    eps_high: float = Field(0.2, ge=0.0, le=10.0, description="Upper clip of the surrogate: 1 + eps_high.")
    C: float = Field(
        2.0, ge=1.0, le=1e4, description="Truncation of w = min(π_θ/μ, C) (tis, f-tis only)."
    )
    filter: Literal["paper", "authors-code"] = Field(
        "paper",
        description="The negative-advantage filter's statistic (f-* only; losses.fis): paper = the "
        "sequence KL(π_θ‖μ) the paper states, Σ_t (r log r − r + 1); authors-code = the authors' "
        "code, mean over the group's longest completion of k3(log μ − log π_θ), with A ≤ 0.",
    )
    g: float | None = Field(
        None,
        ge=0.0,
        le=1e9,
        description="Threshold of the filter (f-* only); null = the source's own: 50 (paper), 5 (authors-code).",
    )

    @property
    def threshold(self) -> float:
        return self.g if self.g is not None else (50.0 if self.filter == "paper" else 5.0)

    @model_validator(mode="after")
    def _knobs_belong_to_name(self) -> "FISConfig":
        variant = VARIANTS[self.name]
        if not variant.filtered:
            stray = sorted({"g", "filter"} & self.model_fields_set)
            if stray:
                raise ValueError(f"{', '.join(stray)} only applies to f-nois, f-vis, f-tis, not {self.name}")
        if not variant.truncate and "C" in self.model_fields_set:
            raise ValueError(f"C only applies to tis and f-tis, not {self.name}")
        return self


class GSPOConfig(BaseModel):
    """GSPO: sequence-level clipped ratio (length-normalised)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Literal["gspo"] = Field("gspo", description="Loss name.")
    eps_low: float = Field(3e-4, ge=0.0, le=1.0, description="Lower clip: s ≥ 1 − eps_low (GSPO: 3e-4).")
    eps_high: float = Field(4e-4, ge=0.0, le=10.0, description="Upper clip: s ≤ 1 + eps_high (GSPO: 4e-4).")


class GEPOConfig(BaseModel):
    """GEPO: sequence weight p_i over the group expectation of q, optional defensive mix and KL."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Literal["gepo"] = Field("gepo", description="Loss name.")
    eps_low: float = Field(0.2, ge=0.0, le=1.0, description="Lower clip: w ≥ 1 − eps_low.")
    eps_high: float = Field(0.2, ge=0.0, le=10.0, description="Upper clip: w ≤ 1 + eps_high.")
    eps_defensive: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Defensive-sampling ε_d (eq. 15): weight of sg(p_i) in the denominator; "
        "0 = plain GEPO, 1 = policy gradient.",
    )
    beta: float = Field(
        0.0, ge=0.0, le=10.0, description="CPPO-KL weight to the behaviour policy (paper: 0.005 under delay)."
    )


class CustomLossConfig(BaseModel):
    """A loss of your own by import path; every other key is passed to it as a keyword argument.

    The function is `fn(inputs: LossInputs, **kwargs) -> LossOutputs` (losses.custom, README).
    """

    model_config = ConfigDict(extra="allow", frozen=True)
    name: str = Field(
        pattern=r"^[^:\s]+:[A-Za-z_][A-Za-z0-9_.]*$",
        description="`package.module:function` (importable) or `path/to/file.py:function` "
        "(relative to the working directory); the other keys of `loss` are its keyword arguments.",
    )

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


CUSTOM_TAG = "module:function"
CONFIG_CLASSES = (GRPOConfig, PGConfig, FISConfig, GSPOConfig, GEPOConfig)
LOSS_NAMES: tuple[str, ...] = tuple(n for c in CONFIG_CLASSES for n in get_args(c.model_fields["name"].annotation))
_CLASS_OF = {n: c for c in CONFIG_CLASSES for n in get_args(c.model_fields["name"].annotation)}


def loss_name(value: Any) -> str | None:
    """The union tag of a loss config: its built-in name, or CUSTOM_TAG for an import path."""
    name = value.get("name") if isinstance(value, dict) else getattr(value, "name", None)
    return CUSTOM_TAG if isinstance(name, str) and ":" in name else name


LossConfig = Annotated[
    Union[tuple(Annotated[c, Tag(n)] for n, c in _CLASS_OF.items()) + (Annotated[CustomLossConfig, Tag(CUSTOM_TAG)],)],
    Discriminator(loss_name),
]
_ADAPTER: TypeAdapter = TypeAdapter(LossConfig)


def parse_loss_config(name: str, **cfg: Any) -> BaseModel:
    """Validate `cfg` for loss `name`; ValueError naming the loss and the offending field."""
    if name not in LOSS_NAMES and ":" not in name:
        raise ValueError(f"unknown loss {name!r}; expected one of {', '.join(LOSS_NAMES)}, "
                         "or module:function for a loss of your own")
    try:
        return _ADAPTER.validate_python({**cfg, "name": name})
    except ValidationError as e:
        raise ValueError(f"invalid config for loss {name!r}: {_describe(e)}") from None


def _describe(e: ValidationError) -> str:
    """One line per error: `field: message (got value)`; the union tag is dropped from the path."""
    parts = []
    for err in e.errors():
        loc = [str(x) for x in err["loc"][1:]]  # loc[0] is the discriminator tag
        where = ".".join(loc) or "config"
        msg = err["msg"].removeprefix("Value error, ")
        got = f" (got {err['input']!r})" if loc else ""
        parts.append(f"{where}: {msg}{got}")
    return "; ".join(parts)
