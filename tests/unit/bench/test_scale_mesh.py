"""The gossipsub mesh model of the scale simulation (bench/scale/mesh.py): meshes within gossipsub's bounds, every
message reaches every online subscriber, and every copy sent is a copy received."""

from __future__ import annotations

import random

import numpy as np

from bench.scale.mesh import D_HI, D_LO, Mesh
from bench.scale.model import Setting, make_world


def _mesh(peers: int = 50, **kw) -> Mesh:
    s = Setting(name="m", peers=peers, nat=kw.pop("nat", 0.0), hostile=0.0, churn=False, **kw)
    world = make_world(s, random.Random(3))
    mesh = Mesh(world, random.Random(4), horizon_s=30.0, msg_bytes=900)
    for i in range(peers):
        mesh.join(i)
    return mesh


def test_meshes_are_symmetric_and_within_gossipsubs_degree_bounds():
    mesh = _mesh(nat=0.3)
    for tick in range(1, 4):
        mesh.heartbeat(tick, counting=False)
    for u in range(mesh.n):
        assert D_LO <= len(mesh.mesh[u]) <= D_HI
        assert mesh.mesh[u] <= mesh.conn[u] and all(u in mesh.mesh[v] for v in mesh.mesh[u])
    nat = ~mesh.dialable
    assert not any(nat[u] and nat[v] for u in range(mesh.n) for v in mesh.conn[u])  # nobody dials a NAT peer


def test_every_message_reaches_every_online_subscriber_with_duplicates():
    mesh = _mesh()
    mesh.heartbeat(1, counting=True)
    for p in range(mesh.n):
        arr = mesh.publish(p, 1.5 + p * 0.01, counting=True)
        assert np.isfinite(arr).all() and arr[p] == 0.0 and (np.delete(arr, p) > 0).all()
    st = mesh.stats
    assert st["messages"] == 50 and st["reached"] == st["subscribers"] == 50 * 49
    assert st["copies"] >= st["reached"]  # ≥ 1 copy per delivery
    assert st["copies"] > 1.5 * st["reached"]  # the mesh edges a message did not cross first carry duplicates
    assert mesh.up.sum() == mesh.down.sum() > 0  # every copy and every IHAVE sent was received


def test_a_peer_that_leaves_drops_out_and_a_newcomer_grafts_at_the_next_heartbeat():
    mesh = _mesh()
    mesh.heartbeat(1, counting=False)
    mesh.leave(7)
    assert all(7 not in m for m in mesh.mesh) and all(7 not in c for c in mesh.conn)
    assert np.isinf(mesh.publish(0, 1.2, counting=False)[7])
    mesh.join(7)
    assert not mesh.mesh[7]  # connected, no mesh yet
    mesh.heartbeat(2, counting=False)
    assert len(mesh.mesh[7]) >= D_LO and np.isfinite(mesh.publish(0, 2.2, counting=False)).all()


def test_iwant_pulls_a_message_to_a_peer_the_mesh_does_not_reach():
    mesh = _mesh()
    mesh.heartbeat(1, counting=False)
    for v in list(mesh.mesh[5]):  # peer 5 loses its mesh; its connections stay
        mesh.mesh[v].discard(5)
    mesh.mesh[5].clear()
    mesh._graph = None
    mesh.g_src = np.array([u for u in range(mesh.n) if u != 5 and 5 in mesh.conn[u]][:1], np.int64)
    mesh.g_dst = np.array([5] * len(mesh.g_src), np.int64)
    p = next(u for u in range(mesh.n) if u != 5 and 5 not in mesh.conn[u] and u != mesh.g_src[0])
    arr = mesh.publish(p, 1.1, counting=True)
    holder = int(mesh.g_src[0])  # IHAVE at its next heartbeat, then IWANT, then the message: 1.5 path RTTs at least
    assert np.isfinite(arr[5]) and arr[5] >= arr[holder] + 0.75 * (mesh.rtt[5] + mesh.rtt[holder])
    assert mesh.stats["by_iwant"] == 1 and mesh.stats["iwant"] == 1
