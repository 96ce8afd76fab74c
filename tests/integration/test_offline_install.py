"""The offline install as a real box does it (README, "A GPU box without network"): a box whose transformers
and peft are not .venv's lists what it has; the wheelhouse is built here from that list (PyPI is needed for
this part); the box installs the project from the folder alone with INSTALL.txt's command (`--no-index
--require-hashes -r wheelhouse/requirements.txt`, no pip configuration) and runs a node for two rounds with a
LoRA adapter; before that, the GPU box's one command (deploy/gpu_check.py) runs its CPU dry run there.

What the box varies: transformers 4.57.6 and peft 0.17.1 (older releases the project's requirements
admit; huggingface_hub, tokenizers and the rest follow them). Such a box lacks pydantic and rich, which
.venv's transformers brings: the case that failed. What it does not vary: torch, 2.13.0 CPU as in .venv, the
only torch that is small to install on the CI machine (a different one is a multi-GB CUDA build), and the
Python, 3.11. Another Python is covered by the second test: a wheelhouse for 3.12 holds the pure-Python
source-only distributions as py3-none-any wheels built here and pycosat as a source with its build tools,
and, where a Python 3.12 interpreter is on this machine (pyenv's), it installs those offline and pycosat
builds there from the folder alone.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
BOX = {"torch": "2.13.0", "transformers": "4.57.6", "peft": "0.17.1"}
SOURCE_ONLY = ["varint", "zss", "cellpylib", "python-baseconv", "prefetch-generator"]  # pure Python, no wheel


def sh(*cmd, timeout=600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)


def _canon(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def listed(text: str) -> dict[str, str]:
    """`pip list --format=freeze` (or requirements.txt, its --hash lines joined to their entry) → canonical name →
    version."""
    lines = text.replace("\\\n", " ").splitlines()
    return {_canon(n): v.split()[0] for n, v in (ln.split("==", 1) for ln in lines if "==" in ln)}


@pytest.fixture(scope="module")
def kept(tmp_path_factory) -> Path:
    """The wheelhouse's cache for these tests alone: the first builds the source-only ones, the second reuses."""
    return tmp_path_factory.mktemp("swarm-cache")


def wheelhouse(box_list: Path, out: Path, cache: Path, *extra: str) -> subprocess.CompletedProcess:
    return sh(sys.executable, ROOT / "deploy" / "wheelhouse.py", "--present-from", box_list, "--out", out, *extra,
              env=dict(os.environ, SWARM_CACHE_DIR=str(cache)), timeout=900)


def test_a_box_with_other_transformers_and_peft_installs_offline_and_runs_a_node(tmp_path, kept):
    ours = {n: md.version(n) for n in BOX}
    assert ours["transformers"] != BOX["transformers"] and ours["peft"] != BOX["peft"], ours
    box = tmp_path / "box"
    assert sh(sys.executable, "-m", "venv", box).returncode == 0
    python = box / "bin" / "python"
    made = sh(python, "-m", "pip", "install", "-q", *(f"{n}=={v}" for n, v in BOX.items()))
    assert made.returncode == 0, made.stderr[-2000:]
    (tmp_path / "box.txt").write_text(sh(python, "-m", "pip", "list", "--format=freeze").stdout)
    had = listed((tmp_path / "box.txt").read_text())
    assert had["transformers"] == "4.57.6" and "pydantic" not in had and "rich" not in had

    built = wheelhouse(tmp_path / "box.txt", tmp_path / "wheelhouse", kept)
    assert built.returncode == 0, built.stderr[-3000:]
    assert "[1/" in built.stdout and "checking the folder" in built.stdout  # progress, and the offline check ran
    assert "built here into varint-1.0.2-py3-none-any.whl" in built.stdout  # an empty cache: built, not reused
    held = listed((tmp_path / "wheelhouse" / "requirements.txt").read_text())
    assert {"pydantic", "rich", "hivemind", "reasoning-gym", "rlswarm-node"} <= held.keys()
    assert not held.keys() & had.keys()  # nothing the box has at a version that serves
    files = sorted(p.name for p in (tmp_path / "wheelhouse").iterdir())
    assert not [f for f in files if f.endswith((".tar.gz", ".zip"))], files  # this Python: all built here
    for name in SOURCE_ONLY:
        assert any(f.startswith(f"{name.replace('-', '_')}-") and f.endswith("-py3-none-any.whl") for f in files), name
    notes = (tmp_path / "wheelhouse" / "INSTALL.txt").read_text()
    command = next(ln.strip() for ln in notes.splitlines() if ln.strip().startswith("python3 -m pip install"))
    assert command.endswith("--no-index --find-links wheelhouse --require-hashes -r wheelhouse/requirements.txt")
    entries = (tmp_path / "wheelhouse" / "requirements.txt").read_text().replace("\\\n", " ").splitlines()
    assert entries and all("==" in e and " --hash=sha256:" in e for e in entries), entries

    offline = dict(os.environ, PIP_CONFIG_FILE=os.devnull)  # the folder alone: no index, no configured links
    got = sh(python, *shlex.split(command)[1:], env=offline, cwd=tmp_path)  # the box's command, from beside the folder
    assert got.returncode == 0, got.stdout[-2000:] + got.stderr[-2000:]
    after = listed(sh(python, "-m", "pip", "list", "--format=freeze").stdout)
    assert {n: after.get(n) for n in had} == had  # the box's own distributions untouched
    where = sh(python, "-c", "import node, transformers, peft; print(node.__file__, transformers.__version__, "
               "peft.__version__)", cwd=tmp_path).stdout.split()
    assert where[0].startswith(str(box)) and where[1:] == [BOX["transformers"], BOX["peft"]]

    env = dict(os.environ, SWARM_CACHE_DIR=str(tmp_path / "cache"), HF_HUB_OFFLINE="1")  # tiny-qwen2 built there
    gpu_check_dry_run(python, tmp_path, env)

    run = sh(box / "bin" / "swarm", "node", "--config", ROOT / "examples" / "tiny-solo.yaml", "--rounds", "2",
             "--out", tmp_path / "run", "--set", "model.lora.r=8", env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [0, 1] and rows[-1]["policy_version"] == 2
    assert (tmp_path / "run" / "checkpoints" / "round-00000001" / "adapter").is_dir()  # peft saved the adapter


def gpu_check_dry_run(python: Path, tmp_path: Path, env: dict) -> None:
    """The GPU box's one command (deploy/gpu_check.py) in its CPU dry run, in this box: the install from the
    wheelhouse (pytest came with it), the GPU tests collected, and bench scenarios each in its own process on
    the box's transformers 4.57.6 — fp32-autocast (float32 weights under bf16 autocast, which crashed the decode
    loop on 4.57), lora made to run out of memory (SWARM_BENCH_FAIL), and the reference still run after it."""
    out = tmp_path / "gpu-check"
    got = sh(python, ROOT / "deploy" / "gpu_check.py", "--dry-run", "--wheelhouse", tmp_path / "wheelhouse",
             "--out", out, "--scenarios", "fp32-autocast", "lora", "hf-generate", cwd=tmp_path, timeout=900,
             env=dict(env, PIP_CONFIG_FILE=os.devnull, SWARM_BENCH_FAIL="lora:oom"))
    assert got.returncode == 1, got.stdout[-3000:] + got.stderr[-3000:]  # lora did not pass
    summary = json.loads((out / "summary.json").read_text())
    assert {s["step"]: s["status"] for s in summary["steps"]} == {"install": "ok", "tests": "ok", "bench": "failed"}
    assert summary["scenarios"] == {"fp32-autocast": "ok", "lora": "out of memory", "hf-generate": "ok"}
    assert summary["versions"]["transformers"] == BOX["transformers"] and summary["versions"]["device"] == "cpu"
    rows = json.loads((out / "gpu_dry.json").read_text())["scenarios"]
    assert [r["name"] for r in rows] == ["fp32-autocast", "lora", "hf-generate"]
    assert rows[0]["decode"] == "eager: no CUDA" and rows[0]["is_weight_max"] < 1.1
    assert "--no-index --find-links" in got.stdout and "--require-hashes -r" in got.stdout  # the box's command
    assert (out / "gpu-check-logs.tar.gz").stat().st_size < 1 << 20  # small enough to send back


def python312() -> Path | None:
    """A Python 3.12 interpreter on this machine, if any (on PATH, or one of pyenv's)."""
    found = [shutil.which("python3.12")] + sorted(Path("~/.pyenv/versions").expanduser().glob("3.12*/bin/python3.12"))
    for exe in filter(None, found):
        if sh(exe, "-c", "import ensurepip, venv").returncode == 0:
            return Path(exe)
    return None


def test_a_wheelhouse_for_another_python_holds_universal_wheels_and_pycosat_with_its_build_tools(tmp_path, kept):
    """The box has everything .venv has but hivemind and reasoning-gym and what only they pull in."""
    gone = {"rlswarm-node", "hivemind", "reasoning-gym", "pydantic", "pydantic-core", "pycosat", "py-cid",
            "py-multibase", "py-multihash", "py-multicodec", *SOURCE_ONLY}
    freeze = sh(sys.executable, "-m", "pip", "list", "--format=freeze").stdout.splitlines()
    (tmp_path / "box.txt").write_text("\n".join(ln for ln in freeze if _canon(ln.split("==")[0]) not in gone) + "\n")
    built = wheelhouse(tmp_path / "box.txt", tmp_path / "w312", kept, "--python-version", "3.12")
    assert built.returncode == 0, built.stderr[-3000:]
    assert "pycosat 0.6.6: a C extension; its source goes in" in built.stdout
    w = tmp_path / "w312"
    files = sorted(p.name for p in w.iterdir())
    for name in SOURCE_ONLY:
        assert any(f.startswith(f"{name.replace('-', '_')}-") and f.endswith("-py3-none-any.whl") for f in files), name
    assert "pycosat-0.6.6.tar.gz" in files and any(f.startswith("setuptools-") for f in files)
    assert any(f.startswith("pydantic_core-") and "-cp312-" in f for f in files)
    assert not any("-cp311-" in f for f in files), files
    assert "pycosat-0.6.6.tar.gz" in (w / "INSTALL.txt").read_text()
    exe = python312()
    if exe is None:
        return  # no 3.12 here: the folder was still checked by pip for 3.12 (--no-index) before it ended
    assert sh(exe, "-m", "venv", tmp_path / "v312").returncode == 0
    python = tmp_path / "v312" / "bin" / "python"
    got = sh(python, "-m", "pip", "install", "--no-index", "--find-links", w, "--no-deps", "pycosat", *SOURCE_ONLY,
             env=dict(os.environ, PIP_CONFIG_FILE=os.devnull), cwd=tmp_path)
    assert got.returncode == 0, got.stderr[-2000:]
    solved = sh(python, "-c", "import pycosat, varint, baseconv, prefetch_generator; print(pycosat.solve([[1, -2], [2]]))")
    assert solved.stdout.strip() == "[1, 2]", solved.stderr
