"""Objects of the user's own code by import path: the one resolver behind custom losses and reward functions.

    load_object("mypkg.rewards:exact_match")          # an importable module
    load_object("examples/byo/reward.py:exact_match")  # a Python file, relative to the working directory

A module path is imported with the working directory on `sys.path` (as `python -m` has it), so
a module beside the config works whether the node was started as `swarm` or `python -m ops.cli`.
A file is loaded once per absolute path under a private module name. Torch-free.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any


class PluginError(ValueError):
    """An import path that names nothing callable; the message is the one line the user sees."""


def load_object(spec: str, what: str = "object") -> Any:
    """The callable named by `module:attr` or `file.py:attr` (PluginError if it is not one)."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise PluginError(f"{what} {spec!r}: expected module:function or path/to/file.py:function")
    module = _load_file(target, spec, what) if target.endswith(".py") or "/" in target else _import(target, spec, what)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise PluginError(f"{what} {spec!r}: {target} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise PluginError(f"{what} {spec!r} is not callable")
    return obj


def _import(name: str, spec: str, what: str):
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise PluginError(f"{what} {spec!r}: cannot import {name}: {exc}") from None


def _load_file(target: str, spec: str, what: str):
    path = Path(target).expanduser().resolve()
    if not path.is_file():
        raise PluginError(f"{what} {spec!r}: no such file {target}")
    name = "rlswarm_user_" + hashlib.sha256(str(path).encode()).hexdigest()[:16]
    if name in sys.modules:
        return sys.modules[name]
    loader_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module
    try:
        loader_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise PluginError(f"{what} {spec!r}: {path.name} failed to import: {type(exc).__name__}: {exc}") from None
    return module
