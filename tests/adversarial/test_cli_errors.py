"""Finding 8: every user error of the CLI is one line on stderr and exit status 2.

Before: a port in use (Prometheus, p2p, bootstrap) and an --out under a regular file or not
writable ended in a traceback and exit 1; `--rounds 0` silently ran the config's rounds;
`--set key` without `=` exited 1.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tests.adversarial.procs import cli

pytestmark = pytest.mark.integration
SOLO = ["node", "--config", "examples/tiny-solo.yaml"]


@pytest.fixture
def busy_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def _one_line_exit_2(proc, *needles: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


def test_prometheus_port_in_use(tmp_path, busy_port):
    proc = cli(*SOLO, "--out", str(tmp_path / "o"), "--set", f"metrics.prometheus_port={busy_port}")
    _one_line_exit_2(proc, "metrics.prometheus_port", str(busy_port), "in use")


def test_p2p_port_in_use(tmp_path, busy_port):
    proc = cli(*SOLO, "--out", str(tmp_path / "o"), "--set", "swarm.enabled=true",
               "--set", f"swarm.host_maddrs=[/ip4/127.0.0.1/tcp/{busy_port}]")
    _one_line_exit_2(proc, "swarm.host_maddrs", str(busy_port), "in use")


def test_bootstrap_port_in_use(busy_port):
    proc = cli("bootstrap", "--host-maddrs", f"/ip4/127.0.0.1/tcp/{busy_port}", "--startup-timeout", "30")
    _one_line_exit_2(proc, "--host-maddrs", str(busy_port), "in use")


def test_out_under_a_regular_file(tmp_path):
    (tmp_path / "file").write_text("x")
    _one_line_exit_2(cli(*SOLO, "--out", str(tmp_path / "file" / "run")), str(tmp_path / "file" / "run"))
    _one_line_exit_2(cli(*SOLO, "--out", str(tmp_path / "file")), "not a directory")


def _unwritable(tmp_path: Path) -> list[Path]:
    """A directory this user cannot create and one it cannot write in."""
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        return [locked / "run", locked]
    if not Path("/sys/kernel").is_dir():
        pytest.skip("root, and no sysfs: no place here that root cannot write")
    return [Path("/sys/rlswarm-test-out"), Path("/sys/kernel")]  # EPERM on mkdir, EACCES on create


def test_out_not_writable(tmp_path):
    for target in _unwritable(tmp_path):
        _one_line_exit_2(cli(*SOLO, "--out", str(target)), str(target))


@pytest.mark.parametrize("args, needle", [
    (["--rounds", "0"], "--rounds"),
    (["--rounds", "-3"], "--rounds"),
    (["--set", "train.lr"], "key=value"),
    (["--set", "train.lr=["], "train.lr"),
])
def test_bad_flags(tmp_path, args, needle):
    _one_line_exit_2(cli(*SOLO, "--out", str(tmp_path / "o"), *args), needle)


def test_local_rounds_0_is_refused(tmp_path):
    _one_line_exit_2(cli("local", "--nodes", "2", "--config", "examples/tiny-swarm.yaml", "--rounds", "0",
                         "--out", str(tmp_path / "o")), "--rounds")


def test_every_listed_user_error_exists():
    import importlib

    from ops.cli.errors import USER_ERRORS

    for module, name in USER_ERRORS:
        assert issubclass(getattr(importlib.import_module(module), name), Exception), (module, name)


def test_heterorl_roles_without_their_peers_fail_before_the_model_is_built(tmp_path):
    """A learner without a swarm and a sampler with nobody to follow: one line, no output dir, no model build."""
    proc = cli(*SOLO, "--out", str(tmp_path / "l"), "--set", "role=learner")
    _one_line_exit_2(proc, "role learner needs a swarm")
    proc = cli(*SOLO, "--out", str(tmp_path / "s"), "--set", "role=sampler", "--set", "swarm.enabled=true")
    _one_line_exit_2(proc, "role sampler needs heterorl.follow")
    assert not (tmp_path / "l").exists() and not (tmp_path / "s").exists()
