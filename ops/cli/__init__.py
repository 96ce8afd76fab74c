"""The `swarm` command line: `main` parses and dispatches (ops.cli.main); each command's work is in
its own module — `local` (ops.cli.local), `plot` (ops.cli.plot), `config doc` (ops.cli.config_doc) —
and user errors become one line and exit 2 (ops.cli.errors). Only argparse and yaml load at start;
a command imports torch, hivemind or reasoning-gym when it runs. Beside them: `args` (values every
command parses alike: --set, --rounds), `network` (the network flags and peers files of `swarm node`),
`doctor` (`swarm doctor`'s checklist), `lifetime` (output dir, free ports, a lock; how a command stops)
and `watchdog` (the process that cleans up after a command killed outright).
"""

from ops.cli.main import main

__all__ = ["main"]
