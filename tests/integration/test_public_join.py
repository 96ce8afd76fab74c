"""The README's "Joining a public swarm", command for command: `swarm bootstrap … --maddrs-file peers.txt`, then
`swarm node --config … --initial-peers-file peers.txt --identity node.key` twice; both nodes must train on the
other's groups (groups_external > 0, the other's peer id in external_peers).

- on one machine through loopback (any user);
- on one host whose peers file names its network address, not loopback (before: every fetch failed,
  `all dropped: fetch_failed`): the host is a network namespace with an address on a virtual switch,
  once a private one with the nodes' default (loopback) listen address, once a documentation-range one
  that libp2p deems neither private nor public (this CI machine has such an address) with the nodes
  listening on every interface;
- across three hosts (namespaces on one switch): the bootstrap on one, a node with an open port on
  each of the other two (`--host-maddrs /ip4/0.0.0.0/tcp/31337 --announce-maddrs /ip4/<its IP>/tcp/31337`).

The namespace tests need root and `ip netns` (they skip with the reason otherwise) and dial only
addresses inside the namespaces they make.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from node.round.record import read_lines
from ops.cli.network import read_peers
from swarm.host.local import Child, stop_all
from tests.integration.netns import Hosts

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "ops.cli"]
EXCHANGE_TIMEOUT_S = 300  # both nodes' start (torch, the model, p2pd) and a few rounds, on a busy 2-core machine

Launch = Callable[[str, list[str], Path], subprocess.Popen]  # (host, command, log) → process


def _here(_host: str, cmd: list[str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as fh:
        return subprocess.Popen(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "OMP_NUM_THREADS": "1"})


def _on(hosts: Hosts) -> Launch:
    def launch(host: str, cmd: list[str], log: Path) -> subprocess.Popen:
        with open(log, "ab") as fh:
            return hosts.popen(host, cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
    return launch


def _peer_id(log: Path) -> str:
    return log.read_text().split(" peer ", 1)[1].split()[0]


def _readme_join(tmp: Path, launch: Launch, *, boot_host: str, boot_args: list[str],
                 nodes: dict[str, tuple[str, list[str]]]) -> dict[str, list[dict]]:
    """Run the README's commands (bootstrap → peers file → one `swarm node` per entry of `nodes`: name →
    (host, network flags)) until every node has trained on every other node's groups; each node's metrics."""
    peers_file, children = tmp / "peers.txt", []
    try:
        boot_log = tmp / "bootstrap.log"
        children.append(Child("bootstrap", launch(boot_host, CLI + [
            "bootstrap", *boot_args, "--identity", str(tmp / "bootstrap.key"), "--swarm-id", "my-project",
            "--maddrs-file", str(peers_file)], boot_log), boot_log))
        found = read_peers(str(peers_file), wait_s=120)
        assert found.swarm_id == "my-project" and found.maddrs, peers_file.read_text()
        for k, (name, (host, flags)) in enumerate(nodes.items()):
            (tmp / name).mkdir()
            log = tmp / name / "node.log"
            # each its own seed, as the README asks: nodes with the same model and seed generate the same groups,
            # and a peer trains on a group once (the second copy is a duplicate)
            children.append(Child(name, launch(host, CLI + [
                "node", "--config", "examples/tiny-swarm.yaml", "--initial-peers-file", str(peers_file),
                "--identity", str(tmp / f"{name}.key"), *flags, "--out", str(tmp / name), "--rounds", "1000",
                "--set", f"seed={k + 1}", "--set", f"tasks.seed={k + 1}"], log), log))
        ids: dict[str, str] = {}
        deadline = time.monotonic() + EXCHANGE_TIMEOUT_S
        while True:
            for c in children:
                assert c.poll() is None, f"{c.name} exited {c.returncode}: {c.log.read_text()[-3000:]}"
            rows = {n: read_lines(tmp / n / "metrics.jsonl") if (tmp / n / "metrics.jsonl").is_file() else []
                    for n in nodes}
            ids.update({n: _peer_id(tmp / n / "node.log") for n in nodes if n not in ids and rows[n]})
            used = {n: {p for r in rows[n] if r["groups_external"] > 0 for p in r["external_peers"]} for n in nodes}
            if len(ids) == len(nodes) and all(used[n] >= {ids[m] for m in nodes if m != n} for n in nodes):
                return rows
            assert time.monotonic() < deadline, (
                f"no exchange both ways in {EXCHANGE_TIMEOUT_S} s; peers file: {found.maddrs}; per node "
                "(round, groups_external, peer_groups_note): "
                + repr({n: [(r["round"], r["groups_external"], r.get("peer_groups_note")) for r in rows[n]][-4:]
                        for n in nodes}))
            time.sleep(1.0)
    finally:
        stop_all(children, grace_s=20)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_readme_join_on_one_machine_through_loopback(tmp_path):
    port = _free_port()  # a same-machine swarm: the bootstrap's "public IP" is 127.0.0.1
    rows = _readme_join(tmp_path, _here, boot_host="", nodes={"a": ("", []), "b": ("", [])}, boot_args=[
        "--host-maddrs", f"/ip4/127.0.0.1/tcp/{port}", "--announce-maddrs", f"/ip4/127.0.0.1/tcp/{port}"])
    assert all(any(r["groups_external"] > 0 for r in rows[n]) for n in "ab")


@pytest.mark.parametrize("subnet, node_flags", [
    ("10.231.7", []),  # a private network address; the nodes listen on loopback (the default)
    ("198.51.100", ["--host-maddrs", "/ip4/0.0.0.0/tcp/0"]),  # TEST-NET-2: neither private nor public to libp2p
], ids=["private-address-loopback-nodes", "documentation-address-nodes-on-all-interfaces"])
def test_the_readme_join_on_one_host_whose_peers_file_names_its_network_address(tmp_path, subnet, node_flags):
    with Hosts(["host"], subnet=subnet) as hosts:
        ip = hosts.addr["host"]
        rows = _readme_join(tmp_path, _on(hosts), boot_host="host", boot_args=[
            "--host-maddrs", "/ip4/0.0.0.0/tcp/31337", "--announce-maddrs", f"/ip4/{ip}/tcp/31337"],
            nodes={"a": ("host", node_flags), "b": ("host", node_flags)})
        assert read_peers(str(tmp_path / "peers.txt")).maddrs[0].startswith(f"/ip4/{ip}/tcp/31337/p2p/")
    assert all(any(r["groups_external"] > 0 for r in rows[n]) for n in "ab")


def test_the_readme_join_across_three_hosts(tmp_path):
    with Hosts(["boot", "a", "b"], subnet="10.231.8") as hosts:
        def open_port(host: str) -> list[str]:
            return ["--host-maddrs", "/ip4/0.0.0.0/tcp/31337", "--announce-maddrs", f"/ip4/{hosts.addr[host]}/tcp/31337"]

        rows = _readme_join(tmp_path, _on(hosts), boot_host="boot", boot_args=open_port("boot"),
                            nodes={"a": ("a", open_port("a")), "b": ("b", open_port("b"))})
    assert all(any(r["groups_external"] > 0 for r in rows[n]) for n in "ab")
