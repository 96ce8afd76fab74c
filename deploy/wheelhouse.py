"""`make wheelhouse`: the wheels a machine without network needs to install this project, when it already
has torch, transformers and peft (a GPU box or an air-gapped cluster usually does).

    .venv/bin/python deploy/wheelhouse.py [--out wheelhouse] [--python-version 3.12] [--present NAME ...]

What goes in: the project's own wheel, and every distribution the project requires (recursively, from
the installed metadata of `.venv`, at the versions installed there) that is not already required by
what the target has (`--present`, default torch transformers peft: those and everything they pull in
are left out; ≈ 104 MiB for Python 3.11; name more, e.g. `--present torch transformers peft scipy
matplotlib`, for a box that has them too: ≈ 47 MiB). Each is fetched as a wheel for the target Python (`--python-version`,
default this interpreter's; Linux x86-64 manylinux) with `pip download --only-binary`; a distribution
published only as source (pycosat, a C extension reasoning-gym requires) is built into a wheel here when
the target Python is this one, otherwise its source archive goes in together with setuptools and wheel,
and pip builds it on the target (a C compiler is needed there). On the target:

    pip install --no-index --find-links wheelhouse rlswarm-node

The folder also gets `requirements.txt` (what is in it, pinned) and `INSTALL.txt` (that command).
Progress is printed per distribution (k/N); the total size at the end.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import re
import subprocess
import sys
import time
from pathlib import Path

from packaging.requirements import Requirement

PROJECT = "rlswarm-node"
PRESENT = ["torch", "transformers", "peft"]  # what the target already has (with everything they require)
LIMIT_MIB = 64  # what one copy to the project's test GPU box carries
PLATFORMS = ["manylinux_2_34", "manylinux_2_31", "manylinux_2_28", "manylinux_2_27", "manylinux_2_24",
             "manylinux_2_17", "manylinux2014", "manylinux1"]
BUILD_TOOLS = ["setuptools", "wheel"]  # to build a source-only distribution on the target


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(roots: list[str]) -> dict[str, str]:
    """Installed distributions the roots require, recursively (markers evaluated, no extras): name → version."""
    found: dict[str, str] = {}
    todo = [canon(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue  # optional or platform-specific, not installed here
        found[name] = dist.version
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canon(req.name))
    return found


def needed(present: list[str]) -> dict[str, str]:
    """What the wheelhouse must hold: the project's closure minus what the target's `present` ones bring."""
    ours = closure([PROJECT])
    ours.pop(PROJECT, None)
    there = closure(present)
    return {n: v for n, v in sorted(ours.items()) if n not in there}


def pip(*args: str) -> bool:
    return subprocess.run([sys.executable, "-m", "pip", *args, "-q"], capture_output=True, text=True).returncode == 0


def fetch(name: str, version: str, out: Path, target: str) -> str:
    """'wheel', 'built' or 'sdist' (how it went in); raises RuntimeError if none worked."""
    cross = target != f"{sys.version_info.major}.{sys.version_info.minor}"
    plat = ["--python-version", target, "--implementation", "cp"] + \
        [a for p in PLATFORMS for a in ("--platform", f"{p}_x86_64")] if cross else []
    if pip("download", "--no-deps", "--only-binary=:all:", *plat, "-d", str(out), f"{name}=={version}"):
        return "wheel"
    if not cross and pip("wheel", "--no-deps", "-w", str(out), f"{name}=={version}"):
        return "built"
    if pip("download", "--no-deps", "--no-binary=:all:", "-d", str(out), f"{name}=={version}"):
        return "sdist"
    raise RuntimeError(f"could not get {name}=={version} as a wheel or a source archive")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="wheelhouse")
    ap.add_argument("--python-version", default=f"{sys.version_info.major}.{sys.version_info.minor}",
                    help="the target's Python, e.g. 3.12 (default: this interpreter's)")
    ap.add_argument("--present", nargs="+", default=PRESENT,
                    help="distributions the target already has (left out with all they require)")
    args = ap.parse_args(argv)
    if not re.fullmatch(r"3\.\d+", args.python_version):
        print(f"wheelhouse: --python-version must look like 3.12, got {args.python_version!r}", file=sys.stderr)
        return 2
    try:
        md.distribution(PROJECT)
    except md.PackageNotFoundError:
        print(f"wheelhouse: {PROJECT} is not installed in {sys.prefix}: run make setup first", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    unknown = [n for n in args.present if n not in closure([n])]
    if unknown:
        print(f"wheelhouse: --present names what is not installed here: {' '.join(unknown)}", file=sys.stderr)
        return 2
    todo, started, how = needed(args.present), time.perf_counter(), {}
    root = Path(__file__).resolve().parents[1]
    if not pip("wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(root)):
        print("wheelhouse: could not build the project's wheel", file=sys.stderr)
        return 1
    for k, (name, version) in enumerate(todo.items(), 1):
        try:
            how[name] = fetch(name, version, out, args.python_version)
        except RuntimeError as exc:
            print(f"wheelhouse: {exc}", file=sys.stderr)
            return 1
        elapsed = time.perf_counter() - started
        print(f"[{k}/{len(todo)}] {name}=={version}: {how[name]} ({elapsed:.0f} s, ETA {elapsed / k * (len(todo) - k):.0f} s)",
              flush=True)
    if "sdist" in how.values():  # pip builds those on the target, offline: it needs the build tools as wheels
        for tool in BUILD_TOOLS:
            fetch(canon(tool), md.version(tool), out, args.python_version)
    pins = [f"{n}=={v}" for n, v in todo.items()]
    (out / "requirements.txt").write_text("\n".join(pins) + "\n")
    (out / "INSTALL.txt").write_text(
        f"On a machine with torch, transformers and peft installed (Python {args.python_version}):\n"
        f"    pip install --no-index --find-links {out.name} {PROJECT}\n"
        + ("Built there from source (needs a C compiler): " + " ".join(n for n, h in how.items() if h == "sdist") + "\n"
           if "sdist" in how.values() else ""))
    size = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    print(f"wheelhouse: {len(todo) + 1} distributions in {out}/ ({size / 2**20:.1f} MiB) for Python "
          f"{args.python_version}; install there with: pip install --no-index --find-links {out} {PROJECT}")
    if size > LIMIT_MIB * 2**20:
        print(f"wheelhouse: more than {LIMIT_MIB} MiB; if the target has more of these already, name them with "
              f"--present (make wheelhouse PRESENT='torch transformers peft scipy matplotlib')")
    return 0


if __name__ == "__main__":
    sys.exit(main())
