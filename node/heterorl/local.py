"""`swarm local` for HeteroRL: the --set items that wire a learner and its samplers together.

A learner gets a stable identity (its config's `swarm.identity_path`, or `OUT/<name>/identity.key`,
created here), so its peer id is known before it starts and survives a restart; every sampler whose
`heterorl.follow` is empty follows the plan's learners, and evaluates nothing (it holds a learner's
weights; the learner's held-out accuracy is the one that matters).
"""

from __future__ import annotations

from pathlib import Path

from node.config import ConfigError, NodeConfig


def role_sets(roles: list[str], names: list[str], bases: list[NodeConfig], out: Path) -> list[list[str]]:
    """Extra `--set` items per node (same order as `roles`)."""
    from swarm.net.identity import load_or_create_identity, peer_id_of_key

    sets: list[list[str]] = [[] for _ in roles]
    learners = []
    for i, (role, name, base) in enumerate(zip(roles, names, bases)):
        if role == "learner":
            path = Path(base.swarm.identity_path or out / name / "identity.key")
            path.parent.mkdir(parents=True, exist_ok=True)
            learners.append(peer_id_of_key(load_or_create_identity(path)[0]))
            sets[i] += ["role=learner", f"swarm.identity_path={path}"]
    for i, (role, base) in enumerate(zip(roles, bases)):
        if role == "sampler":
            sets[i] += ["role=sampler", "eval.every=0"]
            if not base.heterorl.follow:
                if not learners:
                    raise ConfigError("a sampler needs a learner to follow: add a learner node, use --samplers, "
                                      "or set heterorl.follow")
                sets[i].append(f"heterorl.follow=[{','.join(learners)}]")
    return sets
