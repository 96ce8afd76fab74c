"""The decode-loop and scorer tests on the transformers versions a GPU box is likely to have (`make test-versions`).

A GPU box rarely has the transformers this project is developed on (.venv's), and the decode loop uses parts
of transformers that changed between releases (StaticCache, the attention functions: node.generation.compat).
This runs TESTS on each version in VERSIONS and on .venv's own, and prints one line per version:

    .venv/bin/python tests/version_matrix.py [--versions 4.57.1 5.0.0] [--dir DIR] [-- pytest arguments]

Each version gets a virtualenv DIR/tf<version> (default DIR: $SWARM_CACHE_DIR/versions, else
~/.cache/rlswarm/versions), made once: torch 2.13.0 first (the CPU wheel, as `make setup` takes it), then the
project editable with that transformers pinned (its other requirements as pip resolves them beside it), and
pytest. Each version also builds its own test models (SWARM_CACHE_DIR=DIR/cache-tf<version>): a tokenizer saved
by transformers 5.x does not load in 4.57. Making a virtualenv takes a few minutes (network: PyPI); the tests
then take about 2–4 minutes a version on 2 cores. The exit status is 1 when any version failed. Not part of
`make test` (CI's time is short); run it when the decode loop, the scorer or the transformers floor changes.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERSIONS = ("4.57.1", "5.0.0")  # pyproject.toml's floor (>=4.57) and the first 5.x
TESTS = ["tests/unit/node/test_decode_versions.py", "tests/unit/node/test_decode_loop.py", "tests/unit/node/test_device.py",
         "tests/unit/node/test_vocab_memory.py", "tests/unit/node/test_node_train.py"]


def sh(cmd: list, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)


def ensure_venv(version: str, base: Path) -> Path:
    """DIR/tf<version>'s python, the virtualenv made first when it is not there (module doc)."""
    venv = base / f"tf{version.replace('.', '')}"
    python = venv / "bin" / "python"
    stamp = venv / f".ready-{version}"
    if stamp.is_file():
        return python
    print(f"version-matrix: making {venv} (torch 2.13.0, transformers {version}, the project)", flush=True)
    steps = [[sys.executable, "-m", "venv", venv],
             [python, "-m", "pip", "install", "-q", "torch==2.13.0"],
             [python, "-m", "pip", "install", "-q", f"transformers=={version}", "torch==2.13.0", "pytest>=8",
              "-e", ROOT]]
    for cmd in steps:
        got = sh(cmd)
        if got.returncode != 0:
            raise SystemExit(f"version-matrix: {' '.join(map(str, cmd))} failed: "
                             f"{(got.stderr.strip().splitlines() or [''])[-1]}")
    stamp.write_text("")
    return python


def run(python: Path, cache: Path, pytest_args: list[str]) -> tuple[str, float, bool, str]:
    """(the transformers version, seconds, whether they passed, pytest's closing line) of TESTS in `python`."""
    version = sh([python, "-c", "import transformers; print(transformers.__version__)"]).stdout.strip()
    env = {**os.environ, "SWARM_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1"}
    t0 = time.perf_counter()
    got = sh([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS, *pytest_args], cwd=ROOT, env=env)
    out = (got.stdout + got.stderr).strip().splitlines()
    closing = next((ln.strip("= ") for ln in reversed(out) if re.search(r"\d+ (passed|failed|errors?)\b", ln)),
                   out[-1] if out else "no output")
    return version, time.perf_counter() - t0, got.returncode == 0, closing


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--versions", nargs="+", default=list(VERSIONS))
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("pytest_args", nargs="*")
    args = ap.parse_args(argv)
    base = args.dir or Path(os.environ.get("SWARM_CACHE_DIR", "~/.cache/rlswarm")).expanduser() / "versions"
    base.mkdir(parents=True, exist_ok=True)
    pythons = [(v, ensure_venv(v, base), base / f"cache-tf{v.replace('.', '')}") for v in args.versions]
    dev_cache = Path(os.environ.get("SWARM_CACHE_DIR", "~/.cache/rlswarm")).expanduser()
    pythons.append(("development", ROOT / ".venv" / "bin" / "python", dev_cache))
    lines, ok = [], True
    for label, python, cache in pythons:
        print(f"version-matrix: {label}: {python} …", flush=True)
        version, seconds, passed, closing = run(python, cache, args.pytest_args)
        ok &= passed
        lines.append(f"transformers {version:<8} {'PASS' if passed else 'FAIL'}  {closing}  ({seconds:.0f} s)")
        print(f"version-matrix: {lines[-1]}", flush=True)
    print("\n".join(["", "version matrix (" + ", ".join(TESTS) + "):", *lines]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
