"""`make wheelhouse`: the wheels a Linux machine without network needs to install this project beside what
it already has (a GPU box or an air-gapped cluster usually has torch, transformers and peft).

    on the box:  python3 -m pip list --format=freeze > box.txt
    here:        .venv/bin/python deploy/wheelhouse.py --present-from box.txt [--python-version 3.12]
                     [--arch x86_64|aarch64] [--glibc 2.34] [--out wheelhouse]
    on the box:  python3 -m pip install --no-index --find-links wheelhouse --require-hashes -r wheelhouse/requirements.txt

What goes in is what pip on the box would install: pip resolves the project here for the box's Python, CPU
and C library (manylinux wheels), beside a stand-in of the box's own environment that holds every
distribution box.txt lists, at the box's versions (deploy/boxpip.py). Those stay out unless the project
needs another version of one; nothing the box lacks is left out. A distribution published only as source
is built into a wheel here: a pure-Python one (py3-none-any) installs on any Python; a C extension (pycosat,
which reasoning-gym requires) built here fits only a box with this machine's Python and CPU, so for another
its source goes in with the build tools it declares, and pip builds it on the box (a C compiler is needed).

Before it ends it checks the folder the way the box will use it: pip resolves the project again from the
folder alone (`--no-index`, no pip configuration) beside the same stand-in, with the box's command. The folder
also gets `requirements.txt` (every distribution the box installs, pinned `==`, with the sha256 of each of its
files: the box's command, `--require-hashes -r` it, refuses a file edited in the folder and installs no other
version dropped beside), `SHA256SUMS` (every file, for `sha256sum -c`) and `INSTALL.txt` (the command for the
box). pytest goes in beside the project (`WITH`), unless the box has it: deploy/gpu_check.py, the box's one
command, runs the GPU tests with it. Progress is printed step by step. Downloads are kept by hash under $SWARM_CACHE_DIR/wheels (default
~/.cache/rlswarm/wheels), and wheels built here under its built*/ with their sha256 recorded (a later run takes
those before a newer source-only release). Whatever is taken from there is hashed again first: a download whose
hash is no longer the index's is downloaded again, a built wheel that no longer has its recorded hash is built
again.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

sys.path.insert(0, str(Path(__file__).resolve().parent))
from boxpip import (  # noqa: E402
    Box,
    Missing,
    build_requires,
    fetch,
    is_pure,
    keep_built,
    requires_dist,
    reuse_built,
    sha256_of,
    tail,
)

PROJECT = "rlswarm-node"
ROOT = Path(__file__).resolve().parents[1]
HERE = f"{sys.version_info.major}.{sys.version_info.minor}"
HERE_TAG = f"cp{sys.version_info.major}{sys.version_info.minor}-{platform.machine()}"
ARCHES = ("x86_64", "aarch64")
FREEZE_LINE = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*(\S+)")
HOW = "write it on the box with: python3 -m pip list --format=freeze > box.txt"
SOURCE = (".tar.gz", ".zip")
WITH = ["pytest>=8"]  # beside the project: the box's GPU check (deploy/gpu_check.py) runs tests/gpu with it


def say(text: str) -> None:
    print(f"wheelhouse: {text}", flush=True)


def read_present(path: Path) -> dict[str, str]:
    """`pip list --format=freeze` output → canonical name → version; ValueError names a line it cannot read."""
    present = {}
    for k, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = FREEZE_LINE.fullmatch(line)
        if not m:
            raise ValueError(f"{path} line {k} is not NAME==VERSION: {line[:60]!r} ({HOW})")
        try:
            Version(m[2])
        except InvalidVersion:
            say(f"{path} line {k}: {m[2]!r} is no version pip can compare; {m[1]} counts as absent")
            continue
        present[canonicalize_name(m[1])] = m[2]
    if not present:
        raise ValueError(f"{path} lists no NAME==VERSION line ({HOW})")
    return present


def from_sources(reqs: list[str], box: Box, built: Path, sources: dict, cache: Path) -> None:
    """Requirements with no wheel for the box: their sources, built here in one go. A pure one becomes a wheel
    for any Python (into `built`, and kept in `cache`); a C extension one fits only this Python and CPU (else it
    goes to `sources`: name → version, requirements, source archive)."""
    sdists, wheels = box.work / "sdists", box.work / "wheels"
    before = set(sdists.glob("*")) if sdists.is_dir() else set()
    pip_here = [sys.executable, "-m", "pip", "-q"]
    say(f"  published only as source: {' '.join(reqs)}; building wheels here")
    got = subprocess.run([*pip_here, "download", "--no-deps", "--no-binary=:all:", "--python-version", box.python,
                          "-d", str(sdists), *reqs], capture_output=True, text=True)
    new = sorted(set(sdists.glob("*")) - before) if sdists.is_dir() else []
    if got.returncode != 0 or len(new) != len(reqs):
        raise RuntimeError(f"{' '.join(reqs)}: no wheel for Python {box.python} on linux {box.arch} (glibc "
                           f"2.{box.glibc_minor}), and no source pip could fetch: {tail(got.stderr)}")
    made = subprocess.run([*pip_here, "wheel", "--no-deps", "-w", str(wheels), *map(str, new)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        raise RuntimeError(f"could not build {' '.join(p.name for p in new)} here: {tail(made.stderr)}")
    fits_here = box.python == HERE and box.arch == platform.machine()
    for sdist in new:
        name, version = parse_sdist_filename(sdist.name)
        wheel = next(w for w in wheels.glob("*.whl") if parse_wheel_filename(w.name)[:2] == (name, version))
        if is_pure(wheel.name) or fits_here:
            shutil.copy(wheel, built)
            keep_built(wheel, cache / ("built" if is_pure(wheel.name) else f"built-{HERE_TAG}"))
            say(f"  {name} {version}: built here into {wheel.name}")
        else:
            sources[str(name)] = (str(version), requires_dist(wheel), sdist)
            say(f"  {name} {version}: a C extension; its source goes in and the box builds it (needs a C compiler)")


def resolve(box: Box, built: Path, cache: Path, started: float) -> tuple[list[dict], list[dict], dict]:
    """The report items of what the box needs, those of the build tools its sources declare, and the sources
    it builds."""
    roots = [str(next(built.glob("rlswarm_node-*.whl"))), *WITH]
    fits_here = box.python == HERE and box.arch == platform.machine()
    # wheels an earlier run built here from sources (pure, or for this Python and CPU), each hashed again first
    for kept in [cache / "built", *([cache / f"built-{HERE_TAG}"] if fits_here else [])]:
        for name in reuse_built(kept, built):
            say(f"  {name}, built by an earlier run, no longer has the sha256 recorded for it: removed, built again")
    present = {n: (v, []) for n, v in box.present.items() if n != canonicalize_name(PROJECT)}
    sources: dict[str, tuple[str, list[str], Path]] = {}
    say(f"looking for what is published only as source ({time.perf_counter() - started:.0f} s)")
    first = box.resolve(roots, present, [built], sources_too=True)
    only_source = [f"{i['metadata']['name']}=={i['metadata']['version']}" for i in first
                   if not i["download_info"]["url"].split("#")[0].endswith(".whl")]
    if only_source:
        from_sources(only_source, box, built, sources, cache)
    for attempt in range(1, 21):
        say(f"resolving for Python {box.python} on linux {box.arch} beside the box's {len(present)} distributions "
            f"(pass {attempt}, {time.perf_counter() - started:.0f} s)")
        try:
            items = box.resolve(roots, present | {n: (v, r) for n, (v, r, _) in sources.items()}, [built])
            break
        except Missing as m:  # no wheel for the box where the first look (this machine's) found one
            from_sources([str(m)], box, built, sources, cache)
    else:
        raise RuntimeError("20 passes and still a distribution with no wheel: giving up")
    tools = sorted({r for _, _, sdist in sources.values() for r in build_requires(sdist)})
    tool_items = []
    if tools:  # pip builds those on the box in an environment of their own that holds only their build tools
        say(f"resolving the build tools of {' '.join(sources)}: {' '.join(tools)}")
        tool_items = box.resolve(tools, {}, [built])
    return items, tool_items, sources


def collect(items: list[dict], sources: dict, out: Path, cache: Path) -> dict[str, str]:
    """Every resolved distribution (and the sources) into `out`, with progress; returns name → version."""
    held, todo = {}, {}
    for item in items:
        meta, info = item["metadata"], item["download_info"]
        name = canonicalize_name(meta["name"])
        if name not in held:
            held[name] = meta["version"]
            todo[name] = (info["url"].split("#")[0], info.get("archive_info", {}).get("hashes", {}).get("sha256"))
    for name, (version, _, sdist) in sources.items():
        held[canonicalize_name(name)] = version
        shutil.copy(sdist, out)
    t0, size = time.perf_counter(), 0
    for k, (url, sha256) in enumerate(todo.values(), 1):
        dest = out / urllib.parse.unquote(url.rsplit("/", 1)[1])
        fetch(url, sha256, dest, cache)
        size += dest.stat().st_size
        spent = time.perf_counter() - t0
        say(f"[{k}/{len(todo)}] {dest.name} ({size / 2**20:.0f} MiB so far, {spent:.0f} s, "
            f"ETA {spent / k * (len(todo) - k):.0f} s)")
    return dict(sorted(held.items()))


def install_command(out: Path) -> str:
    """What the box runs, from the folder that holds `out`: the pinned, hashed requirements and nothing else."""
    return f"python3 -m pip install --no-index --find-links {out.name} --require-hashes -r {out.name}/requirements.txt"


def _files_of(out: Path) -> dict[tuple[str, Version], list[Path]]:
    """(canonical name, version) → the wheels and source archives `out` holds for it."""
    files: dict[tuple[str, Version], list[Path]] = {}
    for p in sorted(out.iterdir()):
        if p.name.endswith(".whl"):
            name, version = parse_wheel_filename(p.name)[:2]
        elif p.name.endswith(SOURCE):
            name, version = parse_sdist_filename(p.name)
        else:
            continue
        files.setdefault((canonicalize_name(name), version), []).append(p)
    return files


def write_notes(out: Path, held: dict[str, str], args: argparse.Namespace, present: dict[str, str],
                tools: frozenset[str] = frozenset()) -> None:
    """requirements.txt (what the box installs: `held` but the build tools `tools` names, each pinned with the
    sha256 of its files here), SHA256SUMS (every file) and INSTALL.txt (the box's command)."""
    files, lines = _files_of(out), []
    for name, version in held.items():
        if name in tools:  # pip installs those only into the isolated environment that builds a source
            continue
        got = files.get((canonicalize_name(name), Version(version)))
        if not got:
            raise RuntimeError(f"{name} {version} is held but no file of it is in {out}/")
        lines.append(f"{name}=={version}" + "".join(f" \\\n    --hash=sha256:{sha256_of(p)}" for p in got) + "\n")
    (out / "requirements.txt").write_text("".join(lines))
    (out / "SHA256SUMS").write_text("".join(f"{sha256_of(p)}  {p.name}\n" for ps in files.values() for p in ps))
    sources = sorted(p.name for p in out.iterdir() if p.name.endswith(SOURCE))
    text = (f"{PROJECT} for a Linux {args.arch} box with Python {args.python_version} and glibc {args.glibc} or newer,\n"
            f"beside the {len(present)} distributions {Path(args.present_from).name} lists; {len(held)} are held here.\n"
            f"On the box, with the Python whose `pip list` that was, from the folder that holds {out.name}/:\n"
            f"    {install_command(out)}\n"
            f"pip installs only what requirements.txt pins, each file checked against its sha256 there: a file\n"
            f"changed in the folder is refused, another version dropped beside is not installed.\n")
    if sources:
        text += (f"pip builds these there from source (a C compiler is needed): {' '.join(sources)}\n"
                 f"pip checks no hash of the build tools it installs to build them ({' '.join(sorted(tools))}), and\n"
                 f"takes their newest version in the folder: first check that every file is the one written here,\n"
                 f"    (cd {out.name} && sha256sum -c SHA256SUMS)\n"
                 f"and that the folder holds no other wheel or archive.\n")
    (out / "INSTALL.txt").write_text(text)


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # bad input: one line on stderr, exit 2
        print(f"wheelhouse: {message}", file=sys.stderr)
        sys.exit(2)


def main(argv: list[str] | None = None) -> int:
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--present-from", metavar="FILE", help=f"what the box has: {HOW}")
    ap.add_argument("--out", default="wheelhouse")
    ap.add_argument("--python-version", default=HERE, help=f"the box's Python, e.g. 3.12 (default {HERE})")
    ap.add_argument("--arch", default="x86_64", help="the box's CPU, `uname -m` there: x86_64 or aarch64")
    ap.add_argument("--glibc", default="2.34", help="the box's C library, `ldd --version` there (default 2.34)")
    try:
        args = ap.parse_args(argv)
    except SystemExit as done:  # --help, or what Parser.error said
        return int(done.code or 0)
    if not args.present_from:
        return fail(f"say what the box has: --present-from box.txt ({HOW})")
    if not re.fullmatch(r"3\.\d+", args.python_version):
        return fail(f"--python-version must look like 3.12, got {args.python_version!r}")
    if args.arch not in ARCHES:
        return fail(f"--arch must be one of {', '.join(ARCHES)}, got {args.arch!r}")
    if not re.fullmatch(r"2\.(1[7-9]|[2-9]\d)", args.glibc):
        return fail(f"--glibc must look like 2.34 (2.17 or newer), got {args.glibc!r}")
    try:
        needs = SpecifierSet(md.metadata(PROJECT).get("Requires-Python") or "")
    except md.PackageNotFoundError:
        return fail(f"{PROJECT} is not installed in {sys.prefix}: run make setup first")
    if args.python_version not in needs:
        return fail(f"{PROJECT} needs Python {needs}; the box's is {args.python_version}")
    try:
        present = read_present(Path(args.present_from))
    except OSError as exc:
        return fail(f"--present-from: cannot read {args.present_from}: {exc.strerror}")
    except ValueError as exc:
        return fail(str(exc))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():  # an earlier run's files would mislead the box's pip
        if old.is_file() and (old.name.endswith((".whl", ".txt", *SOURCE)) or old.name == "SHA256SUMS"):
            old.unlink()
    started = time.perf_counter()
    cache = Path(os.environ.get("SWARM_CACHE_DIR", "~/.cache/rlswarm")).expanduser() / "wheels"
    with tempfile.TemporaryDirectory(prefix="wheelhouse-") as tmp:
        box = Box(args.python_version, args.arch, int(args.glibc.split(".")[1]), present, Path(tmp))
        built = Path(tmp) / "built"
        built.mkdir()
        say(f"building {PROJECT}'s wheel")
        made = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                               "-w", str(built), str(ROOT)], capture_output=True, text=True)
        if made.returncode != 0:
            return fail(f"could not build {PROJECT}'s wheel: {tail(made.stderr)}", code=1)
        try:
            items, tool_items, sources = resolve(box, built, cache, started)
            held = collect(items + tool_items, sources, out, cache)
            runtime = {canonicalize_name(i["metadata"]["name"]) for i in items} | set(map(canonicalize_name, sources))
            write_notes(out, held, args, present, frozenset(held) - runtime)
            say(f"checking the folder as the box will use it: pip resolves {PROJECT} from it alone (--no-index), "
                f"every file checked against requirements.txt's sha256 (--require-hashes)")
            installed = {n: (v, []) for n, v in present.items() if n != canonicalize_name(PROJECT)}
            box.resolve(["--require-hashes", "-r", str(out / "requirements.txt")],
                        installed | {n: (v, r) for n, (v, r, _) in sources.items()}, [out], offline=True)
            if tool_items:
                box.resolve([f"{i['metadata']['name']}=={i['metadata']['version']}" for i in tool_items], {}, [out],
                            offline=True)
        except RuntimeError as exc:
            return fail(str(exc), code=1)
    size = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    say(f"{len(held)} distributions in {out}/ ({size / 2**20:.1f} MiB) for Python {args.python_version} on linux "
        f"{args.arch}, in {time.perf_counter() - started:.0f} s. Copy the folder to the box, then there: "
        f"{install_command(out)}")
    return 0


def fail(message: str, code: int = 2) -> int:
    print(f"wheelhouse: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
