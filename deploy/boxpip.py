"""pip, asked what it would install on another machine (the box deploy/wheelhouse.py fills a folder for).

pip resolves for another Python and platform when told (`--python-version`, `--platform`,
`--only-binary=:all:`), and `pip install --dry-run --report` says what it would install without installing
it; what it takes as already installed is whatever the running interpreter's environment holds. Two things
are added here:
- a stand-in environment: an empty virtualenv whose site-packages holds one metadata file for every
  distribution the box has, at the box's version (no code), so pip leaves out exactly what the box already
  satisfies and nothing this machine happens to have;
- the box's environment markers: pip evaluates `; python_version >= "3.12"` and the like for the running
  interpreter even with `--python-version` (its own report says so), so pip runs here through a few lines
  that hand its marker evaluation the box's values. The report states the environment pip used; a report
  whose `python_version` is not the box's is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import urllib.request
import zipfile
from pathlib import Path

import pip
from packaging.utils import parse_wheel_filename

MISSING = re.compile(r"No matching distribution found for (\S+)")
# Run by the stand-in's interpreter: this pip (alone on sys.path), its marker environment made the box's.
RUNNER = """import json, sys
sys.path.insert(0, sys.argv[1])
import pip._vendor.packaging.markers as markers
env = dict(markers.default_environment(), **json.loads(sys.argv[2]))
markers.default_environment = lambda: dict(env)
from pip._internal.cli.main import main
sys.exit(main(sys.argv[3:]))
"""


class Missing(Exception):
    """pip found no wheel for this requirement (the message is the requirement)."""


def platforms(arch: str, glibc_minor: int) -> list[str]:
    """pip --platform tags a Linux box with this CPU and glibc 2.<minor> accepts, best first."""
    tags = [f"manylinux_2_{minor}_{arch}" for minor in range(glibc_minor, 16, -1)]
    tags += [f"manylinux2014_{arch}"] + ([f"manylinux2010_{arch}", f"manylinux1_{arch}"] if arch == "x86_64" else [])
    return tags + [f"linux_{arch}"]  # linux_*: only what is built here, for this very Python and CPU


def tail(stderr: str) -> str:
    """The last two lines pip said that matter, as one line."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and "is ignored" not in ln]
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    return " ".join((errors or lines)[-2:])


class Box:
    """The target: its Python (3.N), CPU, glibc minor version and what it has installed (name → version)."""

    def __init__(self, python: str, arch: str, glibc_minor: int, present: dict[str, str], work: Path):
        self.python, self.arch, self.glibc_minor, self.present, self.work = python, arch, glibc_minor, present, work
        self.flags = ["--only-binary=:all:", "--python-version", python, "--implementation", "cp"]
        self.flags += [a for p in platforms(arch, glibc_minor) for a in ("--platform", p)]
        self.markers = {"python_version": python, "python_full_version": f"{python}.0", "implementation_name":
                        "cpython", "implementation_version": f"{python}.0", "platform_python_implementation": "CPython",
                        "os_name": "posix", "sys_platform": "linux", "platform_system": "Linux", "platform_machine": arch}
        self.pipdir = work / "pip-alone"  # pip's package and nothing else: nothing of this venv counts as installed
        self.pipdir.mkdir(parents=True, exist_ok=True)
        if not (self.pipdir / "pip").exists():
            (self.pipdir / "pip").symlink_to(Path(pip.__file__).parent)
        (work / "runner.py").write_text(RUNNER)

    def stand_in(self, installed: dict[str, tuple[str, list[str]]]) -> Path:
        """An empty virtualenv whose site-packages says these are installed (name → version, requirements)."""
        env = self.work / "stand-in"
        shutil.rmtree(env, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
        site = next(env.glob("lib/python*/site-packages"))
        for name, (version, requires) in installed.items():
            info = site / f"{name.replace('-', '_')}-{version}.dist-info"
            info.mkdir()
            (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                           + "".join(f"Requires-Dist: {r}\n" for r in requires))
        return env / "bin" / "python"

    def resolve(self, roots: list[str], installed: dict[str, tuple[str, list[str]]], links: list[Path],
                offline: bool = False, sources_too: bool = False) -> list[dict]:
        """The report items of what pip on the box would install for `roots` beside `installed`.
        `offline`: from `links` alone (--no-index, no pip configuration), as on the box. `sources_too`: a first
        look that may take source archives, for this machine's Python and CPU (with the box's markers), so that
        pip never searches through every version of whatever requires something published only as source."""
        python = self.stand_in(installed)
        report = self.work / "report.json"
        args = ["install", "--dry-run", "--quiet", "--report", str(report)]
        args += ["--prefer-binary"] if sources_too else self.flags
        args += [a for d in links for a in ("--find-links", str(d))] + (["--no-index"] if offline else []) + roots
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        if offline:
            env["PIP_CONFIG_FILE"] = os.devnull
        proc = subprocess.run([str(python), str(self.work / "runner.py"), str(self.pipdir), json.dumps(self.markers),
                               *args], capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            missing = MISSING.search(proc.stderr)
            if missing and not offline:
                raise Missing(missing[1])
            raise RuntimeError(tail(proc.stderr) or f"pip exited {proc.returncode}")
        data = json.loads(report.read_text())
        if data["environment"]["python_version"] != self.python:  # the markers were not the box's: never guess
            raise RuntimeError(f"pip evaluated markers for Python {data['environment']['python_version']}, "
                               f"not the box's {self.python}")
        return data["install"]


def is_pure(wheel: str) -> bool:
    """A wheel every Python 3 takes (py3-none-any, py2.py3-none-any)."""
    return any(t.interpreter == "py3" and t.abi == "none" and t.platform == "any" for t in parse_wheel_filename(wheel)[3])


def requires_dist(wheel: Path) -> list[str]:
    """The Requires-Dist entries of a wheel's metadata."""
    with zipfile.ZipFile(wheel) as z:
        text = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    head = text.split("\n\n", 1)[0]
    return [ln.split(":", 1)[1].strip() for ln in head.splitlines() if ln.startswith("Requires-Dist:")]


def build_requires(sdist: Path) -> list[str]:
    """What pip must install to build this source archive: its pyproject's build-system, else setuptools."""
    text = None
    if sdist.name.endswith(".zip"):
        with zipfile.ZipFile(sdist) as z:
            found = [n for n in z.namelist() if n.count("/") == 1 and n.endswith("/pyproject.toml")]
            text = z.read(found[0]).decode() if found else None
    else:
        with tarfile.open(sdist) as t:
            found = [m for m in t.getmembers() if m.name.count("/") == 1 and m.name.endswith("/pyproject.toml")]
            text = t.extractfile(found[0]).read().decode() if found else None
    declared = tomllib.loads(text).get("build-system", {}).get("requires") if text else None
    return declared if declared is not None else ["setuptools>=40.8.0", "wheel"]


def sha256_of(path: Path) -> str:
    """The sha256 of a file, as hex (what pip's --hash=sha256: and sha256sum write)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def fetch(url: str, sha256: str | None, dest: Path, cache: Path) -> None:
    """One file into `dest`, its sha256 checked; kept in `cache` by hash, and taken from there when kept and its
    content still has that hash (re-hashed on every reuse: a kept file that changed is removed and downloaded
    again)."""
    kept = cache / f"{sha256}-{dest.name}" if sha256 else None
    if kept is not None and kept.is_file():
        if sha256_of(kept) == sha256:
            shutil.copyfile(kept, dest)
            return
        kept.unlink()
        print(f"wheelhouse:   {kept.name} in the cache no longer has the index's sha256: removed, downloading it again",
              flush=True)
    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=180) as r, open(dest, "wb") as f:
        while block := r.read(1 << 20):
            digest.update(block)
            f.write(block)
    if sha256 is None:
        return
    if digest.hexdigest() != sha256:
        dest.unlink()
        raise RuntimeError(f"{dest.name}: sha256 {digest.hexdigest()} is not the index's {sha256}")
    if not url.startswith("file:"):
        cache.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(dest, kept)


def keep_built(wheel: Path, folder: Path) -> None:
    """A wheel built here, kept in `folder` for later runs, its sha256 recorded beside it (NAME.sha256)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(wheel, folder)
    (folder / f"{wheel.name}.sha256").write_text(sha256_of(wheel) + "\n")


def reuse_built(folder: Path, into: Path) -> list[str]:
    """The wheels kept in `folder` (keep_built) copied into `into`, each re-hashed first: one whose sha256 is not the
    one recorded when it was kept (or that has no record) is removed instead, so it is built again. Returns the
    names of those removed."""
    removed = []
    for wheel in sorted(folder.glob("*.whl")) if folder.is_dir() else []:
        record = folder / f"{wheel.name}.sha256"
        recorded = record.read_text().strip() if record.is_file() else None
        if recorded is not None and sha256_of(wheel) == recorded:
            shutil.copy(wheel, into)
            continue
        wheel.unlink()
        record.unlink(missing_ok=True)
        removed.append(wheel.name)
    return removed
