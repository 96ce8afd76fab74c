"""The `swarm` command line: `main` parses and dispatches (node.cli.main); each command's work is in
its own module — `local` (node.cli.local), `plot` (node.cli.plot), `config doc` (node.cli.config_doc) —
and user errors become one line and exit 2 (node.cli.errors). Only argparse and yaml load at start;
a command imports torch, hivemind or reasoning-gym when it runs.
"""

from node.cli.main import main

__all__ = ["main"]
