"""How a node joins a swarm, from the command line: the network flags of `swarm node` / `swarm doctor`
and peers files.

A **peers file** is what a project publishes so that newcomers can join its swarm (README
"Joining a public swarm"); `swarm bootstrap --maddrs-file FILE` writes one:

    # rlswarm peers file: bootstrap multiaddrs, one per line; '#' starts a comment
    swarm: my-project                    # optional: the swarm id these peers serve
    /ip4/198.51.100.4/tcp/31337/p2p/QmBootstrapPeerId...
    /dns4/boot.my-project.org/tcp/31337/p2p/QmOtherBootstrapPeerId...

Every other non-blank line must be a multiaddr ending in /p2p/<peer id>. `--initial-peers-file`
takes a path (waited for up to 300 s: in docker-compose the bootstrap writes it at start) or an
http(s) URL (fetched once). A `swarm:` line sets swarm.swarm_id; naming another one with
`--swarm-id` or `--set swarm.swarm_id=…` is an error.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from node.config import ConfigError

_MADDR = re.compile(r"^/(ip4|ip6|dns|dns4|dns6)/[^\s/]+/(tcp|udp)/\d+(/\S*)?/p2p/\w+$")
_SWARM = re.compile(r"^swarm(?:_id)?\s*:\s*([A-Za-z0-9._-]{1,64})$")
_LOOPBACK = ("/ip4/127.", "/ip6/::1/", "/dns4/localhost/", "/dns/localhost/")


@dataclass
class PeersFile:
    maddrs: list[str]
    swarm_id: str | None = None


def add_flags(parser) -> None:
    """--initial-peers, --initial-peers-file, --identity, --host-maddrs, --announce-maddrs, --client-mode, --swarm-id."""
    g = parser.add_argument_group("joining a swarm (each enables the swarm; README 'Joining a public swarm')")
    g.add_argument("--initial-peers", nargs="+", metavar="MADDR", help="bootstrap multiaddrs (with /p2p/<id>)")
    g.add_argument("--initial-peers-file", metavar="PATH|URL",
                   help="a peers file (one multiaddr a line, optional 'swarm: ID'); a path is waited for")
    g.add_argument("--identity", metavar="FILE", help="RSA identity file, created if missing: a stable peer id")
    g.add_argument("--host-maddrs", nargs="+", metavar="MADDR",
                   help="listen addresses, e.g. /ip4/0.0.0.0/tcp/31337 (default: loopback, a random port)")
    g.add_argument("--announce-maddrs", nargs="+", metavar="MADDR",
                   help="addresses peers should dial, e.g. /ip4/<public IP>/tcp/31337 (a forwarded port)")
    g.add_argument("--client-mode", action="store_true",
                   help="behind NAT / a closed firewall: accept no connections, push our bundles to peers")
    g.add_argument("--swarm-id", help="swarm namespace (must match the swarm's peers)")


def overrides(args) -> dict:
    """Config overrides (dotted keys) for the flags of `add_flags` that were given."""
    out: dict = {}
    peers = list(getattr(args, "initial_peers", None) or [])
    if getattr(args, "initial_peers_file", None):
        found = read_peers(args.initial_peers_file)
        peers += found.maddrs
        if found.swarm_id is not None:
            chosen = [v for v in (getattr(args, "swarm_id", None), _set_value(args, "swarm.swarm_id")) if v]
            if any(v != found.swarm_id for v in chosen):
                raise ConfigError(f"{args.initial_peers_file} serves swarm {found.swarm_id!r}, but you asked for "
                                  f"{chosen[0]!r}; drop --swarm-id / swarm.swarm_id or use that swarm's peers file")
            out["swarm.swarm_id"] = found.swarm_id
    if peers:
        out["swarm.initial_peers"] = list(dict.fromkeys(peers))
    flags = {"identity": "swarm.identity_path", "host_maddrs": "swarm.host_maddrs",
             "announce_maddrs": "swarm.announce_maddrs", "swarm_id": "swarm.swarm_id"}
    for attr, key in flags.items():
        if getattr(args, attr, None):
            out[key] = getattr(args, attr)
    if getattr(args, "client_mode", False):
        out["swarm.client_mode"] = True
    if out:
        out["swarm.enabled"] = True
    return out


def _set_value(args, key: str) -> str | None:
    for item in getattr(args, "set", None) or []:
        k, sep, v = item.partition("=")
        if sep and k.strip() == key:
            return v.strip()
    return None


def parse_peers(text: str, source: str) -> PeersFile:
    """A peers file's multiaddrs and swarm id; ConfigError naming the line on anything else."""
    maddrs, swarm = [], None
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if m := _SWARM.match(line):
            swarm = m.group(1)
        elif _MADDR.match(line):
            maddrs.append(line)
        else:
            raise ConfigError(f"{source}:{i}: {line[:80]!r} is neither a multiaddr with /p2p/<peer id> nor 'swarm: ID'")
    if not maddrs:
        raise ConfigError(f"{source} holds no multiaddr with /p2p/<peer id>")
    return PeersFile(maddrs, swarm)


def read_peers(source: str, wait_s: float = 300.0) -> PeersFile:
    """A peers file from a path (waited for, e.g. while a bootstrap container starts) or an http(s) URL."""
    if source.startswith(("http://", "https://")):
        import urllib.request

        try:
            with urllib.request.urlopen(source, timeout=30) as resp:  # the user's own URL
                text = resp.read(1 << 20).decode("utf-8", errors="replace")
        except Exception as exc:  # URLError, HTTPError, timeouts: one line for the user
            raise ConfigError(f"cannot read the peers file {source}: {exc}") from None
        return parse_peers(text, source)
    path = Path(source)
    deadline = time.monotonic() + wait_s
    while not path.is_file():
        if time.monotonic() > deadline:
            raise FileNotFoundError(f"no peers file at {path} after {wait_s:.0f} s")
        time.sleep(1.0)
    return parse_peers(path.read_text(), str(path))


def write_peers_file(path: Path, maddrs: list[str], *, swarm_id: str | None = None, note: str = "") -> None:
    """Write (atomically) a peers file. Loopback addresses are left out when others exist: they are
    useless from another host or container."""
    reachable = [a for a in maddrs if not a.startswith(_LOOPBACK)] or list(maddrs)
    lines = ["# rlswarm peers file: bootstrap multiaddrs, one per line (README 'Joining a public swarm')"]
    if note:
        lines.append(f"# {note}")
    if swarm_id:
        lines.append(f"swarm: {swarm_id}")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines + reachable) + "\n")
    os.replace(tmp, path)
