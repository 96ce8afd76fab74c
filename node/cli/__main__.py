"""`python -m node.cli …` runs the `swarm` command (what `swarm local` uses to start its children)."""

import sys

from node.cli.main import main

sys.exit(main())
