"""`swarm doctor`: can this machine take part in the swarm its config names, and if not, what to fix.

It starts the node's transport exactly as `swarm node` would (same identity, listen and announce
addresses, client mode), so run it while the node is stopped, and checks:

  bootstrap     the initial peers answer and the DHT is joined
  reachability  every announced address (else every listen address) accepts a libp2p connection
                from a fresh peer that knows nothing but that address; a private or loopback
                address while the initial peers are public is an error, since peers out there
                cannot dial it (client mode: skipped, nobody dials such a node)
  clock         our clock against the swarm's: hivemind's DHT ping carries each peer's DHT time
                (its clock), the offset is taken at the middle of the round trip
  swarm         the nodes among the DHT peers answer `/rlswarm/info/2` with their swarm id and
                protocol version (docs/PROTOCOL.md §6.4); announcements of our swarm seen while
                listening, and what was dropped and why
  fetch         every peer whose announcement we saw (up to 16) accepts a bundle stream, dialled as a
                fetch dials it (its announced addresses, then libp2p's routing: swarm.net.dial); a peer
                we can see but not fetch from is named with the error (`fail` when no peer can be
                fetched from, `warn` when some can)

Each check is `ok`, `warn` (worth knowing, not a failure) or `fail` with a line saying what to
fix; `swarm doctor` exits non-zero when one fails. The probes run on the transport's own loop.
"""

from __future__ import annotations

import asyncio
import ipaddress
import statistics
import time
from dataclasses import dataclass
from functools import partial

from hivemind.p2p import P2P, PeerID
from hivemind.utils.multiaddr import Multiaddr

from swarm.config import SwarmConfig
from swarm.dht.peer import BootstrapUnreachable
from swarm.exchange.hivemind import HivemindTransport
from swarm.net import wire
from swarm.net.dial import open_stream

CLOCK_TOLERANCE_S = 5.0
_PROBE_PEERS = 16


@dataclass
class Check:
    name: str
    status: str  # ok | warn | fail
    detail: str
    fix: str = ""


def _private(maddr: str) -> bool:
    """Loopback, private (RFC 1918 / ULA), link-local or unspecified: not dialable from the Internet."""
    parts = maddr.split("/")
    if len(parts) < 3 or parts[1] not in ("ip4", "ip6"):
        return parts[2] == "localhost" if len(parts) > 2 else False  # a DNS name: assume public
    try:
        ip = ipaddress.ip_address(parts[2])
    except ValueError:
        return False
    return ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_unspecified


def _strip_peer(maddr: str) -> str:
    return maddr.split("/p2p/")[0]


def diagnose(cfg: SwarmConfig, *, listen_s: float = 15.0) -> list[Check]:
    """Run every check (see module docstring); the transport is always shut down again."""
    if not cfg.initial_peers:
        return [Check("bootstrap", "fail", "no initial peers: a node with this config starts a swarm of its own",
                      "pass --initial-peers MADDR or --initial-peers-file PATH|URL (the swarm's peers file)")]
    try:
        transport = HivemindTransport(cfg=cfg.model_copy(update={"enabled": True}))
    except BootstrapUnreachable as exc:
        return [Check("bootstrap", "fail", str(exc), "check the addresses and that the bootstrap peer runs")]
    except Exception as exc:  # p2pd could not start: a listen address or the identity is in use, ...
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return [Check("bootstrap", "fail", f"the p2p daemon did not start: {text}",
                      "stop a node running with this identity or listen address (doctor starts the node's "
                      "transport itself), or pick another --host-maddrs port")]
    try:
        who = f"peer {transport.peer_id}" + (f" (identity {cfg.identity_path})" if cfg.identity_path
                                            else " (a fresh identity: set --identity FILE for a stable one)")
        checks = [Check("bootstrap", "ok", f"joined the DHT through {len(cfg.initial_peers)} initial peer(s) as {who}")]
        checks += _reachability(transport, cfg)
        clock, dht_peers = transport._call(_dht_clock(transport), 60)
        checks.append(_clock_check(clock, len(dht_peers)))
        checks += _swarm_checks(transport, cfg, dht_peers, listen_s)
        checks += _fetch_checks(transport)
        return checks
    finally:
        transport.shutdown()


# -- reachability --------------------------------------------------------------------------------

def _reachability(transport: HivemindTransport, cfg: SwarmConfig) -> list[Check]:
    if cfg.client_mode:
        return [Check("reachability", "ok", "client mode: no listen address; bundles are pushed to reachable peers "
                      "and theirs pulled over our own connections (fine behind NAT)")]
    try:
        addrs = [_strip_peer(a) for a in (cfg.announce_maddrs or transport.visible_maddrs())]
    except Exception as exc:
        return [Check("reachability", "fail", f"this peer has no address: {exc}", "set --host-maddrs")]
    addrs = list(dict.fromkeys(addrs))
    results = transport._call(_dial_each(transport.peer_id, addrs), 30 + 15 * len(addrs))
    bad = [f"{a} ({err})" for a, err in results.items() if err]
    good = [a for a, err in results.items() if not err]
    checks = []
    if bad:
        checks.append(Check("reachability", "fail", "a fresh peer cannot connect to " + "; ".join(bad),
                            "announce the address peers can dial (--announce-maddrs /ip4/<public IP>/tcp/<port>) "
                            "and open or forward that TCP port, or run with --client-mode"))
    else:
        checks.append(Check("reachability", "ok", "a fresh peer connected to " + ", ".join(good)
                            + " (dialled from this host: a NAT port forward is not tested by this)"))
    public_swarm = any(not _private(p) for p in cfg.initial_peers)
    if public_swarm and good and all(_private(a) for a in good):
        checks.append(Check("reachability", "fail", "every address we announce is private or loopback ("
                            + ", ".join(good) + "), but the swarm's peers are on the Internet and cannot dial them",
                            "forward a fixed TCP port to this machine and set --host-maddrs /ip4/0.0.0.0/tcp/<port> "
                            "--announce-maddrs /ip4/<public IP>/tcp/<port>, or run with --client-mode"))
    if public_swarm and any(a.rstrip("/").endswith("/tcp/0") for a in cfg.host_maddrs) and not cfg.announce_maddrs:
        checks.append(Check("reachability", "warn", "listening on a random port: a router cannot forward it",
                            "listen on a fixed port: --host-maddrs /ip4/0.0.0.0/tcp/31337"))
    return checks


async def _dial_each(peer_id: str, addrs: list[str]) -> dict[str, str]:
    """addr → "" when a fresh p2p daemon that knows only that address connects to `peer_id`, else the error."""
    out = {}
    for addr in addrs:
        probe = await P2P.create(no_listen=True, dht_mode="client", use_relay=False, auto_nat=False,
                                 nat_port_map=False)
        try:
            await asyncio.wait_for(probe._client.connect(PeerID.from_base58(peer_id), [Multiaddr(addr)]), 10)
            out[addr] = ""
        except Exception as exc:  # ControlFailure (refused, wrong peer), timeout
            out[addr] = (str(exc).splitlines() or [type(exc).__name__])[0][:120] or type(exc).__name__
        finally:
            await probe.shutdown()
    return out


# -- clock -----------------------------------------------------------------------------------------

async def _ping_clocks(_dht, node, limit: int) -> list[tuple[str, float | None]]:
    """Runs inside the DHT process: (peer, its DHT time − ours at the middle of the round trip) per DHT peer."""
    from hivemind.proto import dht_pb2

    out = []
    for peer in list(node.protocol.routing_table.peer_id_to_uid)[:limit]:
        try:
            sent = time.time()
            resp = await node.protocol.get_stub(peer).rpc_ping(
                dht_pb2.PingRequest(peer=node.protocol.node_info, validate=False), timeout=5)
            now = time.time()
            out.append((peer.to_base58(), resp.dht_time - (sent + now) / 2 if resp.dht_time else None))
        except Exception:
            out.append((peer.to_base58(), None))
    return out


async def _dht_clock(transport: HivemindTransport) -> tuple[list[float], list[str]]:
    found = await transport.dht.run_coroutine(partial(_ping_clocks, limit=_PROBE_PEERS), return_future=True)
    return [o for _, o in found if o is not None], [p for p, _ in found]


def _clock_check(offsets: list[float], peers: int) -> Check:
    if not offsets:
        return Check("clock", "warn", f"no DHT peer answered a ping ({peers} known): clock not compared")
    skew = statistics.median(offsets)
    detail = f"{skew:+.2f} s against {len(offsets)} DHT peer(s) (their clocks minus ours, median)"
    if abs(skew) <= CLOCK_TOLERANCE_S:
        return Check("clock", "ok", detail)
    return Check("clock", "fail", detail + f"; beyond ±{CLOCK_TOLERANCE_S:g} s, peers see our bundles in the wrong "
                 "time window or drop them (future_timestamp / stale_age)",
                 "synchronise this machine's clock (NTP: `timedatectl set-ntp true`, or chrony)")


# -- swarm id, protocol version, announcements ------------------------------------------------------

async def _infos(transport: HivemindTransport, peers: list[str]) -> dict[str, dict]:
    async def ask(peer: str) -> dict | None:
        writer = None
        try:
            _, reader, writer = await asyncio.wait_for(
                transport._p2p.call_binary_stream_handler(PeerID.from_base58(peer), wire.INFO_NAME), 5)
            return await asyncio.wait_for(wire.read_info(reader), 5)
        except Exception:  # a bootstrap peer (DHT only), an older node, or gone
            return None
        finally:
            if writer is not None:
                writer.close()

    answers = await asyncio.gather(*(ask(p) for p in peers))
    return {p: a for p, a in zip(peers, answers) if a is not None}


def _swarm_checks(transport: HivemindTransport, cfg: SwarmConfig, dht_peers: list[str], listen_s: float) -> list[Check]:
    deadline = time.monotonic() + listen_s
    infos = transport._call(_infos(transport, dht_peers), 30)
    delivery = transport.take(min_records=1, timeout=max(0.0, deadline - time.monotonic()))
    announced = transport.peers_seen()
    ours = [p for p, i in infos.items() if i["swarm"] == cfg.swarm_id and i["v"] == wire.WIRE_VERSION]
    others = sorted({f"{i['swarm']!r} (protocol v{i['v']})" for i in infos.values()
                     if (i["swarm"], i["v"]) != (cfg.swarm_id, wire.WIRE_VERSION)})
    seen = f"{announced} peer(s) announced in the last {cfg.max_age_s:g} s"
    checks = []
    if ours or announced:
        more = f"; other nodes here run {', '.join(others)}" if others else ""
        checks.append(Check("swarm", "ok", f"{len(ours)} node(s) of swarm {cfg.swarm_id!r} (protocol "
                            f"v{wire.WIRE_VERSION}) answered; {seen}{more}"))
    elif others:
        swarms = sorted({i["swarm"] for i in infos.values()})
        checks.append(Check("swarm", "fail", f"the nodes here run swarm {', '.join(others)}; your swarm id is "
                            f"{cfg.swarm_id!r} (protocol v{wire.WIRE_VERSION}), so you would exchange with nobody",
                            f"set swarm.swarm_id to the swarm you mean (--swarm-id {swarms[0]}), use that swarm's "
                            "peers file, or upgrade rlswarm where the protocol version differs"))
    else:
        checks.append(Check("swarm", "warn", f"no node of swarm {cfg.swarm_id!r} found among {len(dht_peers)} DHT "
                            f"peer(s) ({seen}): the swarm may be empty right now",
                            "run `swarm doctor` again once nodes run, or check the swarm id in the peers file"))
    drops = {k: v for k, v in delivery.drops.items() if v}
    if drops.get("version"):
        checks.append(Check("protocol", "fail", f"{drops['version']} announcement(s) of another protocol version",
                            "upgrade rlswarm to the swarm's version"))
    if drops.get("future_timestamp") or drops.get("stale_age"):
        checks.append(Check("clock", "warn", f"announcements dropped for their time: {drops}",
                            "synchronise this machine's clock (NTP)"))
    return checks


# -- fetch: the peers we can see, can we reach them? ------------------------------------------------

async def _open_each(transport: HivemindTransport, peers: list[str]) -> dict[str, str]:
    """peer → "" when a bundle stream to it opens (dialled as a fetch would), else the error."""
    async def probe(peer: str) -> str:
        writer = None
        try:
            _, writer = await asyncio.wait_for(
                open_stream(transport.p2p, peer, wire.HANDLER_NAME, transport.inbox.addrs_of(peer)), 15)
            return ""
        except Exception as exc:  # swarm.net.dial.Unreachable, a timeout
            return (str(exc).splitlines() or [""])[0][:240] or type(exc).__name__
        finally:
            if writer is not None:
                writer.close()  # no request written: the peer's handler sees the stream end

    results = await asyncio.gather(*(probe(p) for p in peers))
    return dict(zip(peers, results))


def _fetch_checks(transport: HivemindTransport) -> list[Check]:
    peers = transport.inbox.known_peers()[:_PROBE_PEERS]
    if not peers:
        return []
    results = transport._call(_open_each(transport, peers), 60)
    bad = {p: err for p, err in results.items() if err}
    if not bad:
        return [Check("fetch", "ok", f"a bundle stream opens to each of the {len(peers)} peer(s) that announced")]
    named = "; ".join(f"{p} (announced {' '.join(transport.inbox.addrs_of(p)) or 'no address'}): {err}"
                      for p, err in bad.items())
    return [Check("fetch", "fail" if len(bad) == len(peers) else "warn",
                  f"{len(bad)} of {len(peers)} peer(s) announced bundles but cannot be fetched from: {named}",
                  "such a peer must listen on an address this machine can dial and announce it (on its machine: "
                  "--host-maddrs /ip4/0.0.0.0/tcp/<port> --announce-maddrs /ip4/<its IP>/tcp/<port>; `swarm doctor` "
                  "there says which) or run --client-mode to push its bundles; if no peer can be fetched from, "
                  "check that this machine may open outbound TCP connections")]
