"""Command-line values shared by the benches: `--set key=value` overrides as a node's config reads them."""

from __future__ import annotations


def parse_value(text: str):
    """`--set key=value` values: numbers (2e-4 included), booleans, null, lists as YAML reads them."""
    import yaml

    value = yaml.safe_load(text)
    if isinstance(value, str):  # YAML 1.1 reads "2e-4" as a string
        try:
            return float(value)
        except ValueError:
            return value
    return value


def parse_sets(sets) -> dict:
    """KEY=VALUE strings (`--set` arguments, an update's K=V list) as one overrides dict."""
    return {k: parse_value(v) for k, _, v in (s.partition("=") for s in sets)}
