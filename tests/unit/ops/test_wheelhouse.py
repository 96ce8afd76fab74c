"""deploy/wheelhouse.py and deploy/boxpip.py without the network: the box's list, bad input, tags, source
archives, the stand-in environment and the box's markers (pip run offline on a folder of stub wheels); the
hashes: the box's command (INSTALL.txt's, run by pip offline) refuses a wheel edited in the folder and
installs no higher version dropped beside, and the build side's cache is hashed again before it is reused."""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import io
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[3]
SPEC = importlib.util.spec_from_file_location("wheelhouse", ROOT / "deploy" / "wheelhouse.py")
wheelhouse = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(wheelhouse)
boxpip = sys.modules["boxpip"]  # wheelhouse.py imports it from deploy/


def test_the_box_list_is_pip_list_freeze_with_names_canonical(tmp_path):
    listed = tmp_path / "box.txt"
    listed.write_text("# pip list --format=freeze\ntorch==2.11.0+cu130\nPyYAML==6.0.2\n\nhuggingface_hub==0.36.2\n"
                      "distro-info==1.1build1\n")
    assert wheelhouse.read_present(listed) == {"torch": "2.11.0+cu130", "pyyaml": "6.0.2", "huggingface-hub": "0.36.2"}


@pytest.mark.parametrize("text, message", [("torch @ file:///wheels/torch.whl\n", "line 1 is not NAME==VERSION"),
                                           ("-e git+https://x/y.git#egg=y\n", "line 1 is not NAME==VERSION"),
                                           ("# nothing\n", "lists no NAME==VERSION")])
def test_a_list_pip_list_did_not_write_is_refused_saying_how_to_write_it(tmp_path, text, message, capsys):
    listed = tmp_path / "box.txt"
    listed.write_text(text)
    assert wheelhouse.main(["--present-from", str(listed), "--out", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "pip list --format=freeze" in err and "\n" not in err


@pytest.mark.parametrize("argv, message", [([], "--present-from box.txt"),
                                           (["--python-version", "twelve"], "--python-version"),
                                           (["--python-version", "3.9"], "needs Python >=3.11"),
                                           (["--arch", "riscv64"], "--arch must be one of x86_64, aarch64"),
                                           (["--glibc", "2.5"], "--glibc"),
                                           (["--present-from", "/no/such/box.txt"], "cannot read /no/such/box.txt"),
                                           (["--no-such-flag"], "unrecognized arguments")])
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys, tmp_path):
    listed = tmp_path / "box.txt"
    listed.write_text("torch==2.13.0\n")
    if not any(a == "--present-from" for a in argv) and argv:
        argv = ["--present-from", str(listed), *argv]
    assert wheelhouse.main(["--out", str(tmp_path / "w"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and err.startswith("wheelhouse: ")
    assert not (tmp_path / "w").exists()  # nothing made


def test_platform_tags_follow_the_box_cpu_and_glibc():
    tags = boxpip.platforms("aarch64", 28)
    assert tags[0] == "manylinux_2_28_aarch64" and "manylinux_2_17_aarch64" in tags and tags[-1] == "linux_aarch64"
    assert not any("2_31" in t or "x86_64" in t or "manylinux1" in t for t in tags)
    assert "manylinux1_x86_64" in boxpip.platforms("x86_64", 34)


def test_pure_wheels_are_those_any_python_takes():
    assert boxpip.is_pure("varint-1.0.2-py3-none-any.whl") and boxpip.is_pure("six-1.17.0-py2.py3-none-any.whl")
    assert not boxpip.is_pure("pycosat-0.6.6-cp311-cp311-linux_x86_64.whl")
    assert not boxpip.is_pure("foo-1.0-cp311-none-any.whl")  # this Python's only


def _sdist(path: Path, pyproject: str | None) -> Path:
    with tarfile.open(path, "w:gz") as t:
        for name, text in [("PKG-INFO", "Name: x\n"), ("pyproject.toml", pyproject)]:
            if text is not None:
                data = text.encode()
                info = tarfile.TarInfo(f"x-1.0/{name}")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return path


def test_a_source_archive_needs_what_its_pyproject_declares_else_setuptools(tmp_path):
    flit = _sdist(tmp_path / "x-1.0.tar.gz", '[build-system]\nrequires = ["flit_core>=3.2,<4"]\n')
    assert boxpip.build_requires(flit) == ["flit_core>=3.2,<4"]
    bare = _sdist(tmp_path / "y-1.0.tar.gz", None)
    assert boxpip.build_requires(bare) == ["setuptools>=40.8.0", "wheel"]


def _stub_wheel(folder: Path, name: str, version: str, requires: list[str]) -> None:
    dist = f"{name}-{version}"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(folder / f"{dist}-py3-none-any.whl", "w") as z:
        z.writestr(f"{dist}.dist-info/METADATA", meta)
        z.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{dist}.dist-info/RECORD", "")


def test_pip_keeps_what_the_box_has_and_evaluates_markers_for_the_box(tmp_path):
    """Offline, on stub wheels: `app` needs `lib>=2` (the box has 1.0: it must come), `kept` (the box has it:
    it must not), and `newpy` only on Python >= 3.12 and `oldpy` only below — what pip picks must follow
    the box's Python, not this one's."""
    links = tmp_path / "links"
    links.mkdir()
    _stub_wheel(links, "app", "1.0", ["lib>=2", "kept", 'newpy; python_version >= "3.12"',
                                      'oldpy; python_version < "3.12"'])
    for name in ("lib", "kept", "newpy", "oldpy"):
        _stub_wheel(links, name, "2.0", [])
    picked = {}
    for python in ("3.11", "3.13"):
        work = tmp_path / python
        work.mkdir()
        box = boxpip.Box(python, "x86_64", 34, {"lib": "1.0", "kept": "0.1+cu130"}, work)
        items = box.resolve(["app"], {"lib": ("1.0", []), "kept": ("0.1+cu130", [])}, [links], offline=True)
        picked[python] = sorted(i["metadata"]["name"] for i in items)
    assert picked == {"3.11": ["app", "lib", "oldpy"], "3.13": ["app", "lib", "newpy"]}


def test_the_makefile_passes_what_the_box_has():
    dry = subprocess.run(["make", "-n", "wheelhouse", "PRESENT_FROM=box.txt", "TARGET_PYTHON=3.12", "TARGET_ARCH=aarch64",
                          "TARGET_GLIBC=2.28"], cwd=ROOT, capture_output=True, text=True)
    line = next(ln for ln in dry.stdout.splitlines() if "deploy/wheelhouse.py" in ln)
    assert "--present-from box.txt" in line and "--python-version 3.12" in line
    assert "--arch aarch64" in line and "--glibc 2.28" in line
    old = subprocess.run(["make", "-n", "wheelhouse", "PRESENT=torch transformers peft"], cwd=ROOT, capture_output=True,
                         text=True)
    assert old.returncode != 0 and "PRESENT_FROM" in old.stderr


def _notes(out: Path, held: dict[str, str], tools: frozenset[str] = frozenset()) -> None:
    args = argparse.Namespace(arch="x86_64", python_version=wheelhouse.HERE, glibc="2.34", present_from="box.txt")
    if tools:
        wheelhouse.write_notes(out, held, args, {"torch": "2.13.0"}, tools)
    else:  # the call as it was before the build tools were told apart
        wheelhouse.write_notes(out, held, args, {"torch": "2.13.0"})


def _stub_wheelhouse(tmp_path: Path) -> Path:
    """A wheelhouse as deploy/wheelhouse.py leaves it, of stub wheels: rlswarm-node 1.0 needs lib>=2."""
    out = tmp_path / "wheelhouse"
    out.mkdir()
    _stub_wheel(out, "rlswarm_node", "1.0", ["lib>=2"])
    _stub_wheel(out, "lib", "2.0", [])
    _notes(out, {"lib": "2.0", "rlswarm-node": "1.0"})
    return out


def _box_installs(out: Path, target: Path) -> subprocess.CompletedProcess:
    """INSTALL.txt's command as the box runs it (python3 → this Python, into `target`), from the folder holding `out`."""
    line = next(ln.strip() for ln in (out / "INSTALL.txt").read_text().splitlines()
                if ln.strip().startswith("python3 -m pip install"))
    argv = [sys.executable, *shlex.split(line)[1:], "--target", str(target), "--quiet"]
    return subprocess.run(argv, cwd=out.parent, capture_output=True, text=True,
                          env={**os.environ, "PIP_CONFIG_FILE": os.devnull})


def test_the_box_command_installs_what_requirements_pin_with_their_hashes(tmp_path):
    out = _stub_wheelhouse(tmp_path)
    got = _box_installs(out, tmp_path / "site")
    assert got.returncode == 0, got.stderr
    assert sorted(p.name for p in (tmp_path / "site").glob("*.dist-info")) == ["lib-2.0.dist-info",
                                                                               "rlswarm_node-1.0.dist-info"]
    req = (out / "requirements.txt").read_text()
    for wheel in out.glob("*.whl"):
        assert f"--hash=sha256:{hashlib.sha256(wheel.read_bytes()).hexdigest()}" in req, wheel.name
    assert "--require-hashes -r wheelhouse/requirements.txt" in (out / "INSTALL.txt").read_text()
    checked = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=out, capture_output=True, text=True)
    assert checked.returncode == 0 and checked.stdout.count(": OK") == 2, checked.stdout


def test_a_wheel_edited_in_the_wheelhouse_is_refused_at_install(tmp_path):
    out = _stub_wheelhouse(tmp_path)
    with zipfile.ZipFile(out / "lib-2.0-py3-none-any.whl", "a") as z:
        z.writestr("lib.py", "import os; os.system('echo owned')\n")
    got = _box_installs(out, tmp_path / "site")
    assert got.returncode != 0 and "DO NOT MATCH THE HASHES" in got.stderr, got.stderr
    assert not (tmp_path / "site" / "lib.py").exists()


def test_a_higher_version_dropped_beside_is_not_installed(tmp_path):
    out = _stub_wheelhouse(tmp_path)
    _stub_wheel(out, "lib", "3.0", [])
    got = _box_installs(out, tmp_path / "site")
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "site" / "lib-2.0.dist-info").is_dir() and not (tmp_path / "site" / "lib-3.0.dist-info").exists()


def test_the_wheelhouse_own_check_runs_the_box_command_and_refuses_an_edited_wheel(tmp_path):
    out = _stub_wheelhouse(tmp_path)
    box = boxpip.Box(wheelhouse.HERE, platform.machine(), 34, {}, tmp_path / "work")
    roots = ["--require-hashes", "-r", str(out / "requirements.txt")]
    assert sorted(i["metadata"]["name"] for i in box.resolve(roots, {}, [out], offline=True)) == ["lib", "rlswarm_node"]
    with zipfile.ZipFile(out / "rlswarm_node-1.0-py3-none-any.whl", "a") as z:
        z.writestr("node.py", "")
    with pytest.raises(RuntimeError, match="HASHES"):
        box.resolve(roots, {}, [out], offline=True)


def test_build_tools_are_hashed_in_sha256sums_not_installed_on_the_box(tmp_path):
    out = tmp_path / "wheelhouse"
    out.mkdir()
    _stub_wheel(out, "rlswarm_node", "1.0", ["pycosat"])
    _stub_wheel(out, "setuptools", "80.0", [])
    _sdist(out / "pycosat-0.6.6.tar.gz", None)
    _notes(out, {"pycosat": "0.6.6", "rlswarm-node": "1.0", "setuptools": "80.0"}, frozenset({"setuptools"}))
    req = (out / "requirements.txt").read_text()
    assert "pycosat==0.6.6" in req and "setuptools" not in req
    sums = (out / "SHA256SUMS").read_text()
    assert {ln.split()[1] for ln in sums.splitlines()} == {p.name for p in out.iterdir() if p.name.endswith(("whl", "gz"))}
    notes = (out / "INSTALL.txt").read_text()
    assert "pycosat-0.6.6.tar.gz" in notes and "sha256sum -c SHA256SUMS" in notes and "(setuptools)" in notes


def test_a_kept_download_is_hashed_again_before_it_is_reused(tmp_path):
    good = tmp_path / "lib-2.0-py3-none-any.whl"
    good.write_bytes(b"the index's file")
    sha = hashlib.sha256(good.read_bytes()).hexdigest()
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / f"{sha}-{good.name}").write_bytes(b"edited after it was kept")
    dest = tmp_path / "out" / good.name
    dest.parent.mkdir()
    boxpip.fetch(good.as_uri(), sha, dest, cache)
    assert dest.read_bytes() == b"the index's file"  # downloaded again, not the edited copy
    assert not (cache / f"{sha}-{good.name}").exists()


def test_a_wheel_built_by_an_earlier_run_is_hashed_again_before_it_is_reused(tmp_path):
    """resolve() hands pip the wheels earlier runs built from sources: only those that still have the sha256
    recorded when they were kept (NAME.sha256 beside them); any other is removed, so it is built again."""
    made = tmp_path / "made"
    made.mkdir()
    for name in ("varint", "zss", "cellpylib"):
        _stub_wheel(made, name, "1.0", [])
    kept = tmp_path / "cache" / "built"
    kept.mkdir(parents=True)
    for wheel in made.glob("*.whl"):
        shutil.copy(wheel, kept)
        (kept / f"{wheel.name}.sha256").write_text(hashlib.sha256(wheel.read_bytes()).hexdigest() + "\n")
    with zipfile.ZipFile(kept / "zss-1.0-py3-none-any.whl", "a") as z:
        z.writestr("zss.py", "")
    (kept / "cellpylib-1.0-py3-none-any.whl.sha256").unlink()  # kept without a record: never trusted

    class Box:  # what resolve() shows pip: the wheels in `built` when it first asks
        python, arch, present, seen = wheelhouse.HERE, platform.machine(), {}, None

        def resolve(self, roots, installed, links, offline=False, sources_too=False):
            self.seen = self.seen or sorted(p.name for p in links[0].glob("*.whl"))
            self.roots = roots
            return []

    built = tmp_path / "built"
    built.mkdir()
    _stub_wheel(built, "rlswarm_node", "1.0", [])
    box = Box()
    wheelhouse.resolve(box, built, tmp_path / "cache", 0.0)
    assert box.seen == ["rlswarm_node-1.0-py3-none-any.whl", "varint-1.0-py3-none-any.whl"]
    assert sorted(p.name for p in kept.glob("*.whl")) == ["varint-1.0-py3-none-any.whl"]
    assert box.roots[1:] == ["pytest>=8"]  # the box's GPU check (deploy/gpu_check.py) runs tests/gpu with it
