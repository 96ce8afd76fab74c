"""A real headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`).

No driver package: Chromium reads JSON commands (NUL-terminated) from fd 3 and writes replies and
events to fd 4. `chromium_path()` finds Debian's `chromium`, installing it with apt-get when this
process may (root, apt-get present); a machine where it cannot be had fails the test that needs it,
with the command to run, instead of skipping it.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time

import pytest

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def chromium_path() -> str:
    found = next((p for p in map(shutil.which, CANDIDATES) if p), None)
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=600)
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], env=env, capture_output=True, timeout=900)
        found = next((p for p in map(shutil.which, CANDIDATES) if p), None)
    if found is None:
        pytest.fail("the dashboard's browser test needs Chromium and could not install it: "
                    "run `apt-get install -y chromium` (Debian) or put chromium on PATH")
    return found


class Browser:
    """One headless Chromium with one page; `evaluate` runs JavaScript in it and returns the value."""

    def __init__(self, exe: str, width: int = 1400, height: int = 1000):
        self.profile = tempfile.TemporaryDirectory(prefix="chromium-")
        cmd_r, self._cmd_w = os.pipe()  # we write commands, Chromium reads fd 3
        self._ev_r, ev_w = os.pipe()  # Chromium writes fd 4, we read

        def fds():  # the child's fd 3 and fd 4 (dup first: the pipe ends may themselves be 3 or 4)
            a, b = os.dup(cmd_r), os.dup(ev_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
             "--no-first-run", "--remote-debugging-pipe", f"--user-data-dir={self.profile.name}",
             f"--window-size={width},{height}", "about:blank"],
            pass_fds=(3, 4), preexec_fn=fds, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(cmd_r)
        os.close(ev_w)
        self._id, self._buf = 0, b""
        targets = self.send("Target.getTargets")["targetInfos"]
        page = next(t["targetId"] for t in targets if t["type"] == "page")
        self.session = self.send("Target.attachToTarget", targetId=page, flatten=True)["sessionId"]
        self.send("Page.enable", session=True)
        self.send("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def send(self, method: str, session: bool = False, timeout: float = 30.0, **params):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._next(deadline - time.monotonic())
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def _next(self, timeout: float) -> dict:
        while b"\0" not in self._buf:
            ready, _, _ = select.select([self._ev_r], [], [], max(0.0, timeout))
            if not ready:
                raise TimeoutError("Chromium did not answer")
            chunk = os.read(self._ev_r, 1 << 16)
            if not chunk:
                raise RuntimeError(f"Chromium exited (code {self.proc.poll()})")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def goto(self, url: str) -> None:
        self.send("Page.navigate", session=True, url=url)

    def evaluate(self, expression: str):
        res = self.send("Runtime.evaluate", session=True, expression=expression, returnByValue=True,
                        awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"{expression}: {res['exceptionDetails'].get('text')}")
        return res["result"].get("value")

    def screenshot(self, path) -> None:
        data = self.send("Page.captureScreenshot", session=True, format="png", captureBeyondViewport=True)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._cmd_w)
        os.close(self._ev_r)
        self.profile.cleanup()
