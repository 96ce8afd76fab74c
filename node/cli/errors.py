"""Exceptions that mean "the user asked for something impossible": shown as one line, exit 2."""

from __future__ import annotations


def user_errors() -> tuple[type[BaseException], ...]:
    from node.cli.lifetime import UsageError
    from node.config import ConfigError

    errors: list[type[BaseException]] = [ConfigError, UsageError, FileNotFoundError]
    try:
        from node.checkpoint import CheckpointError

        errors.append(CheckpointError)
    except ImportError:
        pass
    try:
        from node.models.load import ModelNotFound

        errors.append(ModelNotFound)
    except ImportError:
        pass
    try:
        from swarm.local import LaunchError

        errors.append(LaunchError)
    except ImportError:
        pass
    try:
        from swarm.dht import BootstrapUnreachable

        errors.append(BootstrapUnreachable)
    except ImportError:
        pass
    return tuple(errors)
