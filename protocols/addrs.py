"""Dial hints: the addresses an announcement carries so receivers can reach its publisher (docs/PROTOCOL.md §5).

A receiver opens the bundle stream to the announcing peer *id*; without an address for that id it
must ask libp2p's own Kademlia DHT (inside p2pd), which fails in two common places: a node that
listens on loopback only is known to a bootstrap reached over another interface by no address
at all (libp2p identify sends no loopback address over a non-loopback connection), and a host
whose addresses libp2p deems neither private nor public (e.g. 192.0.2.0/24, 198.51.100.0/24)
enters no libp2p routing table. So a publisher names its own addresses in the (signed)
announcement, and a receiver connects to them before it opens the stream.

    addrs = "/ip4/10.0.0.2/tcp/31337 /ip4/127.0.0.1/tcp/31337"    # ≤ MAX_ADDRS, ≤ MAX_CHARS, no /p2p/ part

Only direct TCP addresses (ip4, ip6, dns, dns4, dns6) are carried; relayed and other transports are
left to libp2p's routing. Non-loopback addresses come first, so a remote receiver tries the useful
ones first; loopback ones are kept, they are what a receiver on the publisher's own host dials.

An address is a claim: a peer may name any host and port, and every receiver that dials it sends a
libp2p handshake there. `scope_of` sorts an address into loopback / private / public / name (a DNS
name: its scope is unknown until resolved) / never (link-local — 169.254.169.254 is a cloud's
metadata service —, unspecified, multicast, reserved); `dialable_scopes` says which of them a
receiver dials, from its own addresses (swarm.net.dial).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

MAX_ADDRS = 8
MAX_CHARS = 256  # an announcement's strings are at most 256 bytes (protocols.codec.unpack_small_map)
_ADDR = re.compile(r"/(ip4|ip6|dns|dns4|dns6)/[A-Za-z0-9.:%_-]{1,253}/tcp/(\d{1,5})")
_PEER_SUFFIX = re.compile(r"/p2p/[^/]+$")  # only a final /p2p/<id>: a relayed address keeps its /p2p-circuit
_LOOPBACK = ("/ip4/127.", "/ip6/::1/", "/dns/localhost/", "/dns4/localhost/", "/dns6/localhost/")


def _is_dial_addr(addr: str) -> bool:
    m = _ADDR.fullmatch(addr)
    return m is not None and 0 < int(m.group(2)) < 65536


def encode_addrs(maddrs: Iterable[str]) -> str:
    """Our dial hint from our visible multiaddrs: /p2p/ parts stripped, dialable TCP ones only, non-loopback
    first, as many as fit (MAX_ADDRS, MAX_CHARS). "" when none (client mode: nobody can dial us)."""
    direct = [a for a in dict.fromkeys(_PEER_SUFFIX.sub("", str(m)) for m in maddrs) if _is_dial_addr(a)]
    direct.sort(key=lambda a: a.startswith(_LOOPBACK))  # stable: the daemon's own order within each kind
    out: list[str] = []
    for addr in direct:
        if len(out) == MAX_ADDRS or len(" ".join(out + [addr])) > MAX_CHARS:
            break
        out.append(addr)
    return " ".join(out)


def decode_addrs(text: object) -> str:
    """A received dial hint, normalised; ValueError when it is not one (the announcement is then malformed)."""
    if not isinstance(text, str) or len(text) > MAX_CHARS:
        raise ValueError("addrs is not a string of at most 256 characters")
    addrs = text.split(" ") if text else []  # single spaces exactly: "a  b", " a" or "a\tb" hold an empty or bad one
    if len(addrs) > MAX_ADDRS or not all(_is_dial_addr(a) for a in addrs):
        raise ValueError(f"addrs holds more than {MAX_ADDRS} addresses or one that is not /ip4|ip6|dns*/HOST/tcp/PORT "
                         "(separated by single spaces)")
    return " ".join(addrs)


LOOPBACK, PRIVATE, PUBLIC, NAME, NEVER = "loopback", "private", "public", "name", "never"
_HOST = re.compile(r"/(ip4|ip6|dns|dns4|dns6)/([^/]+)/")


def scope_of(addr: str) -> str:
    """The network scope of a multiaddr: LOOPBACK, PRIVATE, PUBLIC, NAME (a DNS name other than localhost) or
    NEVER (link-local, unspecified, multicast, reserved, or not an ip/dns address at all)."""
    m = _HOST.match(addr + "/")
    if m is None:
        return NEVER
    kind, host = m.groups()
    if kind.startswith("dns"):
        return LOOPBACK if host.lower().rstrip(".") == "localhost" else NAME
    try:
        ip = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return NEVER
    if ip.is_loopback:
        return LOOPBACK
    if ip.is_link_local or ip.is_unspecified or ip.is_multicast or ip.is_reserved:
        return NEVER
    if ip.is_private or ip in _SHARED:
        return PRIVATE
    return PUBLIC if ip.is_global else NEVER


_SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT: reachable like a private network


def dialable_scopes(own: Iterable[str], network: Iterable[str] = ()) -> frozenset[str]:
    """The scopes a receiver dials, from its own addresses (what it listens on or announces) and its network's (its
    initial peers'): loopback ones only while it listens on loopback alone (its peers' loopback addresses are then
    on its own host; from a node that listens elsewhere, a loopback address a peer names would be a service of
    ours), and nothing else when the whole network it knows is loopback; otherwise public addresses and names, and
    private ones when it or its network has a private address or a name. NEVER, never."""
    mine = {scope_of(a) for a in own} - {NEVER}
    known = mine | ({scope_of(a) for a in network} - {NEVER})
    if known and known <= {LOOPBACK}:
        return frozenset({LOOPBACK})
    out = {PUBLIC, NAME} | ({LOOPBACK} if mine and mine <= {LOOPBACK} else set())
    return frozenset(out | ({PRIVATE} if PRIVATE in known or NAME in known else set()))
