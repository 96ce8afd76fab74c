"""Exceptions that mean "the user asked for something impossible": shown as one line, exit 2."""

from __future__ import annotations


def user_errors() -> tuple[type[BaseException], ...]:
    from losses.plugin import PluginError
    from node.config import ConfigError
    from node.export import ExportError
    from node.tasks.config import DatasetError
    from node.tracking import TrackingError

    errors: list[type[BaseException]] = [ConfigError, FileNotFoundError, PluginError, DatasetError, TrackingError,
                                          ExportError]
    try:
        from node.models.load import ModelNotFound

        errors.append(ModelNotFound)
    except ImportError:
        pass
    try:
        from node.models.device import DeviceUnavailable

        errors.append(DeviceUnavailable)
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
