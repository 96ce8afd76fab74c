"""deploy/wheelhouse.py and deploy/boxpip.py without the network: the box's list, bad input, tags, source
archives, the stand-in environment and the box's markers (pip run offline on a folder of stub wheels)."""

from __future__ import annotations

import importlib.util
import io
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
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
