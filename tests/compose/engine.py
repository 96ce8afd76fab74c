"""The Docker side of `make test-compose` (tests/compose/test_compose_up.py): an engine, base images, wheels.

- engine: the running Docker engine, or one started here when this is root (`dockerd --iptables=false
  --bridge=none`; Debian's docker.io is installed first when dockerd is missing) and stopped again at the end
- base images: python:3.11-slim and prom/prometheus when the engine has them or can pull them; otherwise local
  stand-ins made here, under names of their own, handed to docker-compose.yml through its variables
  (RLSWARM_BASE_IMAGE: the build's BASE_IMAGE argument; PROMETHEUS_IMAGE):
    rlswarm-standin/python   a minimal Debian 12 with Python 3.11, its headers and venv and no compiler, like
                             python:3.11-slim (debootstrap, then `docker import`)
    rlswarm-standin/prometheus   Debian 12's prometheus binary on that image, with prom/prometheus's
                             entrypoint, arguments, VOLUME and user (nobody)
- wheels: torch 2.13.0 (CPU) and every distribution the project needs, downloaded here by pip (as pip is set
  up on this machine) into .cache/compose/wheels, served to the build on 127.0.0.1 (RLSWARM_PIP_ARGS; the
  build then runs on the host's network, RLSWARM_BUILD_NETWORK=host), so the build needs no index of its own.
  pycosat stays a source archive: the build stage compiles it, with the compiler it installs from Debian.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "compose"
PYTHON_BASE = "python:3.11-slim"
PROMETHEUS = "prom/prometheus:v2.54.1"
# stand-ins: the recipe's revision is in the tag, so a changed recipe is never mistaken for an old image
STANDIN_PYTHON = "rlswarm-standin/python:3.11-bookworm-r1"
STANDIN_PROMETHEUS = "rlswarm-standin/prometheus:debian12-r2"  # r2: runs as nobody, like prom/prometheus
DEBIAN_PACKAGES = ["python3", "python3-dev", "python3-venv", "python-is-python3", "ca-certificates", "wget"]


class EngineError(RuntimeError):
    """Something this machine lacks for the test; the message says what, in one line."""


def sh(cmd: list[str], timeout: float = 600, check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise EngineError(f"{' '.join(cmd[:4])} … failed ({proc.returncode}): {(proc.stderr or proc.stdout)[-1500:]}")
    return proc


def _apt_install(*packages: str) -> None:
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise EngineError(f"{' '.join(packages)} missing and this is not root with apt-get: install them first")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    sh(["apt-get", "update", "-qq"], env=env)
    sh(["apt-get", "install", "-y", "-qq", *packages], env=env)


class Engine:
    """The Docker engine the test talks to; `stop()` stops it only if `start()` started it."""

    def __init__(self, log: Path):
        self.log = log
        self.proc: subprocess.Popen | None = None

    @staticmethod
    def running() -> bool:
        return shutil.which("docker") is not None and sh(["docker", "info"], timeout=60, check=False).returncode == 0

    def start(self) -> None:
        if self.running():
            return
        if os.geteuid() != 0:
            raise EngineError("no Docker engine answers `docker info`, and only root can start one here")
        if not shutil.which("dockerd") or not shutil.which("docker"):
            _apt_install("docker.io")
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:  # --bridge=none: containers get compose's own networks only
            self.proc = subprocess.Popen(["dockerd", "--iptables=false", "--bridge=none"], stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 90
        while not self.running():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise EngineError(f"dockerd did not come up: {self.log.read_text()[-1500:]}")
            time.sleep(1)

    def stop(self) -> None:
        """SIGTERM to the dockerd started here (it stops its containerd), SIGKILL to what is left after 60 s."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # anything of its session still there (containerd, shims)
        except ProcessLookupError:
            pass

    @property
    def started_here(self) -> bool:
        return self.proc is not None


def have_image(name: str) -> bool:
    return sh(["docker", "image", "inspect", name], timeout=60, check=False).returncode == 0


def pull(name: str) -> bool:
    """True if the engine has the image or could pull it (no registry here: a quick failure, False)."""
    return have_image(name) or sh(["docker", "pull", "-q", name], timeout=300, check=False).returncode == 0


def standin_python() -> str:
    """rlswarm-standin/python: debootstrap a minimal Debian 12 with Python 3.11 and import it (about a minute)."""
    if have_image(STANDIN_PYTHON):
        return STANDIN_PYTHON
    if not shutil.which("debootstrap"):
        _apt_install("debootstrap")
    with tempfile.TemporaryDirectory(prefix="rlswarm-standin-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        sh(["debootstrap", "--variant=minbase", "--include=" + ",".join(DEBIAN_PACKAGES), "bookworm", str(rootfs),
            "http://deb.debian.org/debian"], timeout=1200)
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for p in (rootfs / cache).glob("*"):
                if p.is_file():
                    p.unlink()
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        sh(["docker", "import", "-c", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "-c", "ENV LANG=C.UTF-8", "-c", 'CMD ["python3"]', "-", STANDIN_PYTHON], stdin=tar.stdout, timeout=600)
        tar.wait()
    return STANDIN_PYTHON


PROMETHEUS_DOCKERFILE = """\
FROM {base}
COPY prometheus /bin/prometheus
RUN mkdir -p /etc/prometheus /prometheus && chown 65534:65534 /prometheus
VOLUME ["/prometheus"]
EXPOSE 9090
USER 65534:65534
ENTRYPOINT ["/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
"""


def standin_prometheus(base: str) -> str:
    """rlswarm-standin/prometheus: Debian's prometheus binary (apt-get download) on the python stand-in."""
    if have_image(STANDIN_PROMETHEUS):
        return STANDIN_PROMETHEUS
    with tempfile.TemporaryDirectory(prefix="rlswarm-standin-") as tmp:
        os.chmod(tmp, 0o755)  # apt's sandbox user writes the .deb here
        sh(["apt-get", "download", "prometheus"], cwd=tmp)
        (deb,) = Path(tmp).glob("prometheus_*.deb")
        sh(["dpkg-deb", "-x", str(deb), str(Path(tmp) / "pkg")])
        ctx = Path(tmp) / "ctx"
        ctx.mkdir()
        shutil.copy2(Path(tmp) / "pkg" / "usr" / "bin" / "prometheus", ctx / "prometheus")
        (ctx / "Dockerfile").write_text(PROMETHEUS_DOCKERFILE.format(base=base))
        sh(["docker", "build", "--network", "none", "-q", "-t", STANDIN_PROMETHEUS, str(ctx)],
           env={**os.environ, "DOCKER_BUILDKIT": "0"})
    return STANDIN_PROMETHEUS


def download_wheels(dest: Path = CACHE / "wheels") -> Path:
    """torch (CPU), the build tools and every distribution the project requires, into `dest` (kept: later runs
    download only what changed)."""
    dest.mkdir(parents=True, exist_ok=True)
    sh([sys.executable, "-m", "pip", "download", "-q", "-d", str(dest), "torch==2.13.0", "setuptools>=68", "wheel",
        str(ROOT)], timeout=1800)
    return dest


class WheelServer:
    """A folder over HTTP on 127.0.0.1 (pip --find-links reads the listing) while the build runs."""

    PORT = 38765  # the same URL on every run where it is free: the build's cache holds (the URL is a build argument)

    def __init__(self, folder: Path):
        handler = functools.partial(_QuietHandler, directory=str(folder))
        try:
            self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", self.PORT), handler)
        except OSError:
            self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> WheelServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass
