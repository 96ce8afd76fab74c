"""Benchmark scripts (run as `python -m bench.<name>` from the repository root); results in bench/results/."""
