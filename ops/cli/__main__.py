"""`python -m ops.cli …` runs the `swarm` command (what `swarm local` uses to start its children)."""

import sys

from ops.cli.main import main

sys.exit(main())
