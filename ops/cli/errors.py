"""Exceptions that mean "the user asked for something impossible": shown as one line, exit 2."""

from __future__ import annotations

import sys

# (module, class): an exception of one of these classes can only exist once its module is
# imported, so looking them up in sys.modules imports nothing (the error path stays fast).
USER_ERRORS = (
    ("node.config", "ConfigError"),
    ("ops.cli.lifetime", "UsageError"),
    ("node.books.checkpoint", "CheckpointError"),
    ("node.models.load", "ModelNotFound"),
    ("node.models.device", "DeviceUnavailable"),
    ("node.tasks.config", "DatasetError"),
    ("node.books.tracking", "TrackingError"),
    ("ops.export", "ExportError"),
    ("losses.plugin", "PluginError"),
    ("swarm.host.local", "LaunchError"),
    ("swarm.dht.peer", "BootstrapUnreachable"),
)


def user_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [FileNotFoundError]
    for module, name in USER_ERRORS:
        loaded = sys.modules.get(module)
        if loaded is not None:
            errors.append(getattr(loaded, name))
    return tuple(errors)
