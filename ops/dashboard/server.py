"""The dashboard's HTTP server: read-only, from the package's own files, bound to 127.0.0.1 by default.

  GET /                the page (static/index.html)
  GET /static/<file>   the page's script and style, and the vendored uPlot (static/vendor, MIT)
  GET /api/state       the snapshot of ops.dashboard.state as JSON (the page polls it)

Only GET and HEAD are answered (any other method: 501, the standard library's answer); every
response forbids other origins' scripts (Content-Security-Policy 'self') and is never cached. A
request whose Host header names neither an IP address nor `localhost` (nor a name passed as
`allowed_hosts`) is refused with 403: a web page of another site that makes its own DNS name point
at 127.0.0.1 (DNS rebinding) could otherwise read /api/state from the browser of whoever runs us.
"""

from __future__ import annotations

import ipaddress
import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from ops.dashboard.state import Snapshots

STATIC = Path(__file__).resolve().parent / "static"
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8"}
DEFAULT_PORT = 8050


def _files() -> dict[str, Path]:
    """URL path → file: exactly the page's files, nothing else on disk is reachable."""
    out = {"/": STATIC / "index.html"}
    for p in STATIC.rglob("*"):
        if p.suffix in TYPES:
            out["/static/" + p.relative_to(STATIC).as_posix()] = p
    return out


def finite(value):
    """NaN and ±inf become null: the browser's JSON.parse takes neither."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def host_allowed(host: str, names: frozenset[str] = frozenset()) -> bool:
    """Whether a request's Host header (name or address, maybe with a port) is one the dashboard answers."""
    name = host.strip().lower()
    if name.startswith("["):  # [v6]:port
        name = name[1:name.find("]")] if "]" in name else ""
    elif name.count(":") == 1:
        name = name.rsplit(":", 1)[0]
    if name in ("localhost", "localhost.") or name in names:
        return True
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


class _Handler(BaseHTTPRequestHandler):
    server_version = "rlswarm-dashboard"
    snapshots: Snapshots
    files: dict[str, Path]
    allowed_hosts: frozenset[str] = frozenset()

    def log_message(self, format, *args):  # noqa: A002 — no line per request on the console
        pass

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", "default-src 'self'; img-src 'self' data:")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self):  # noqa: N802
        if not host_allowed(self.headers.get("Host", ""), self.allowed_hosts):
            return self._send(403, b"forbidden host\n", "text/plain; charset=utf-8")
        path = self.path.split("?", 1)[0]
        if path == "/api/state":
            body = json.dumps(finite(self.snapshots.snapshot()), allow_nan=False).encode()
            return self._send(200, body, "application/json")
        f = self.files.get(path)
        if f is None:
            return self._send(404, b"not found\n", "text/plain; charset=utf-8")
        return self._send(200, f.read_bytes(), TYPES[f.suffix])

    do_HEAD = do_GET


class Dashboard:
    """The server for some run dirs, on a background thread (`start`) or in the foreground (`serve_forever`)."""

    def __init__(self, dirs: list[Path], host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                 allowed_hosts: tuple[str, ...] = ()):
        handler = type("Handler", (_Handler,), {"snapshots": Snapshots(dirs), "files": _files(),
                                                "allowed_hosts": frozenset(h.lower() for h in allowed_hosts)})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{'[' + host + ']' if ':' in host else host}:{port}/"

    def start(self) -> Dashboard:
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="dashboard", daemon=True)
        self.thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def close(self) -> None:
        if self.thread is not None:
            self.httpd.shutdown()
        self.httpd.server_close()
