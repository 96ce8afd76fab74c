"""Command-line values every command parses the same way: `--set key=value` and `--rounds`."""

from __future__ import annotations

import yaml

from ops.cli.lifetime import UsageError


def parse_sets(items: list[str] | None) -> dict:
    """`--set key=value` items as {key: YAML value}; UsageError for an item without `=` or a bad value."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set expects key=value, got {item!r}")
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise UsageError(f"--set {key}: the value is not valid YAML ({str(exc).splitlines()[0]})") from None
    return out


def check_rounds(rounds: int | None) -> None:
    if rounds is not None and rounds < 1:
        raise UsageError(f"--rounds must be at least 1, got {rounds}")
