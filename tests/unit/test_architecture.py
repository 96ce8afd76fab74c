"""The project's own shape, checked from its source: no import cycles, layers that point one way,
configs and the CLI that load without torch, documents that exist in the repository."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("protocols", "swarm", "node", "ops", "losses", "bench")
# who may import whom (docs/ARCHITECTURE.md): node → {losses, protocols, swarm}, swarm → protocols,
# ops (the operator's tools) → node and below
ALLOWED = {"protocols": set(), "losses": set(), "swarm": {"protocols"},
           "node": {"losses", "protocols", "swarm"}, "ops": {"node", "losses", "protocols", "swarm"},
           "bench": {"ops", "node", "losses", "protocols", "swarm"}}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _type_checking_only(tree: ast.Module) -> set[int]:
    """Line numbers of imports under `if TYPE_CHECKING:` (annotations only, never executed)."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                for inner in ast.walk(sub):
                    if isinstance(inner, (ast.Import, ast.ImportFrom)):
                        lines.add(inner.lineno)
    return lines


def import_graph(*, type_checking: bool = False, packages: bool = False) -> dict[str, set[str]]:
    """module → project modules it imports anywhere in its body (function-level imports included).

    type_checking: also the imports under `if TYPE_CHECKING:` (a cycle there is one for type checkers
    and readers, and becomes a real one as soon as an annotation is evaluated). packages: `from pkg import
    sub` also depends on `pkg` itself — it reads the name from the package's namespace, so its
    `__init__` runs first (`from pkg.sub import x` names the module and does not count)."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        tree = ast.parse(path.read_text())
        skip = set() if type_checking else _type_checking_only(tree)
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) in skip:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]
                if packages and node.module in modules:
                    targets.append(node.module)
            else:
                continue
            graph[mod] |= {t for t in targets if t in modules and t != mod}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a list of modules (first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a"}}) is None


def test_no_import_cycles():
    cycle = find_cycle(import_graph(type_checking=True, packages=True))
    assert cycle is None, "import cycle: " + " → ".join(cycle)


def test_the_cycle_check_sees_type_checking_imports_and_packages(tmp_path, monkeypatch):
    pkg, ops = tmp_path / "node", tmp_path / "ops"
    pkg.mkdir()
    (ops / "cli").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (ops / "__init__.py").write_text("")
    (ops / "cli" / "__init__.py").write_text("from ops.cli.main import main\n")
    (ops / "cli" / "main.py").write_text("def main():\n    from ops.cli.doctor import run\n")
    (ops / "cli" / "doctor.py").write_text("def run():\n    from ops.cli import network\n")
    (ops / "cli" / "network.py").write_text("")
    (pkg / "state.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from node.node import Node\n")
    (pkg / "node.py").write_text("from node.state import x\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGES", ("node", "ops"))
    assert find_cycle(import_graph()) is None  # what the check saw before it followed TYPE_CHECKING and packages
    assert find_cycle(import_graph(type_checking=True)) == ["node.node", "node.state", "node.node"]
    assert find_cycle(import_graph(packages=True)) == ["ops.cli", "ops.cli.main", "ops.cli.doctor", "ops.cli"]


def test_nothing_below_the_node_imports_it():
    """Inside node/ only the top-level modules (node.runner, ...) may import node.node: the round, federated and
    HeteroRL packages read node.round.parts.RoundParts, so no arrow runs back up from them (imports under
    TYPE_CHECKING included). The operator's commands, which start a node, live above node/ in ops/."""
    bad = sorted(m for m, deps in import_graph(type_checking=True).items()
                 if "node.node" in deps and m.count(".") > 1 and m.startswith("node."))
    assert not bad, f"modules below node.node that import it: {bad}"


def test_bench_scripts_import_only_the_harness():
    """A bench script reads the shared harness (bench.harness) and its own package, never another script:
    what several scripts need lives in the harness. bench.scale is one tool (the swarm-size simulator) in
    several modules."""
    bad = []
    for m, deps in import_graph(type_checking=True).items():
        parts = m.split(".")
        if parts[0] != "bench" or len(parts) < 3 or parts[1] == "harness":
            continue
        # the script, or the package a script is made of (bench.reliability.soak, bench.scale)
        home = "bench.scale" if parts[1] == "scale" else ".".join(parts[:3])
        for n in deps:
            if n.startswith("bench.") and not n.startswith("bench.harness") and not n.startswith(home) \
                    and n != "bench." + parts[1]:
                bad.append((m, n))
    assert not bad, f"bench scripts importing other scripts: {bad}"


def test_no_bench_script_runs_its_own_round_loop():
    """A bench script plays a node's rounds through the harness (bench.harness.rounds.play, run_swarm, the teacher
    bench's run_one), never by importing node.round.loop itself: how a bench node runs is in one place."""
    bad = sorted(m for m, deps in import_graph(type_checking=True).items()
                 if m.startswith("bench.") and not m.startswith("bench.harness") and "node.round.loop" in deps)
    assert not bad, f"bench scripts calling run_round themselves: {bad}"
    assert "node.round.loop" in import_graph(type_checking=True)["bench.harness.rounds"]  # the check sees a
    # function-level import, which is how the harness (and the scripts that did this) import it


def test_layers_point_one_way():
    bad = [(m, n) for m, deps in import_graph().items() for n in deps
           if n.split(".")[0] != m.split(".")[0] and n.split(".")[0] not in ALLOWED[m.split(".")[0]]]
    assert not bad, f"imports against the layering: {bad}"


def test_only_swarm_runs_hivemind_and_asyncio():
    offenders = []
    for mod, path in _modules().items():
        if mod.split(".")[0] in ("swarm", "bench"):
            continue
        text = path.read_text()
        if re.search(r"^\s*(import|from) (hivemind|asyncio)\b", text, re.M):
            offenders.append(mod)
    assert not offenders


@pytest.mark.parametrize("module", ["node.config", "ops.cli", "losses", "losses.config", "swarm.config"])
def test_configs_and_cli_import_without_torch(module):
    code = (f"import sys, {module}; heavy = [m for m in ('torch', 'transformers', 'hivemind', 'reasoning_gym') "
            "if m in sys.modules]; print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"importing {module} pulled in {out.stdout.strip()}"


def test_code_points_only_to_documents_in_the_repository():
    refs = []
    for path in [*ROOT.glob("*.md"), *(ROOT / "docs").rglob("*.md"), *(ROOT / "examples").rglob("*.yaml"),
                 *_modules().values()]:
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"DESIGN(\.md)? ?§|\.\./shared", line):
                refs.append(f"{path.relative_to(ROOT)}:{i}")
            for doc in re.findall(r"docs/((?:benchmarks/)?[A-Za-z]+\.md)", line):
                if not (ROOT / "docs" / doc).is_file():
                    refs.append(f"{path.relative_to(ROOT)}:{i} → docs/{doc} (missing)")
    assert not refs, refs


def test_package_files_stay_readable():
    long = {str(p.relative_to(ROOT)): n for m, p in _modules().items() if m.split(".")[0] != "bench"
            if (n := len(p.read_text().splitlines())) > 420}
    assert not long, f"files over ~400 lines (split them by role): {long}"


# swarm/'s rooms, lowest first: a module imports only its own room and those below (swarm/__init__.py)
SWARM_ROOMS = {"bucket": 0, "config": 0, "net": 1, "dht": 2, "weights": 3, "exchange": 4, "host": 5}


def test_swarm_rooms_point_down():
    """Inside swarm/ imports point down, config and bucket ← net ← dht ← weights ← exchange ← host (imports under
    TYPE_CHECKING and inside functions included): the DHT reads no exchange rule, the config builds no exchange
    object, and the side channels the transports open (weights, averager) never import a transport."""
    graph = import_graph(type_checking=True)
    rooms = {m: m.split(".")[1] for m in graph if m.startswith("swarm.")}
    assert set(rooms.values()) == set(SWARM_ROOMS), f"rooms of swarm/ without a rank here: {set(rooms.values())}"
    bad = sorted((m, n) for m, room in rooms.items() for n in graph[m]
                 if n in rooms and SWARM_ROOMS[rooms[n]] > SWARM_ROOMS[room])
    assert not bad, f"imports up inside swarm/ (move the rule down, or hand the object in): {bad}"


# what node/ must never name: the transports and the side channels each one opens (Transport.open_*)
SWARM_IMPLEMENTATIONS = {"swarm.exchange.twin", "swarm.exchange.hivemind", "swarm.weights.hivemind",
                         "swarm.weights.averaging"}
IMPLEMENTATION_NAMES = {"InMemoryHub", "InMemoryTransport", "HivemindTransport", "InMemoryWeights", "HivemindWeights",
                        "MemoryScoreLink", "HivemindScoreLink", "AdapterAverager", "weight_hub_of"}


def transport_side_doors(tree: ast.Module) -> list[str]:
    """What in one module picks a swarm implementation by itself: an import of a transport or of a side channel's
    implementation, `isinstance` / `issubclass` / `type` on a transport class or a transport, `getattr` / `hasattr`
    on a transport (what the transport offers is its interface, swarm.exchange.transport.Transport)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = {node.module} | {f"{node.module}.{a.name}" for a in node.names}
            if names & SWARM_IMPLEMENTATIONS or {a.name for a in node.names} & IMPLEMENTATION_NAMES:
                found.append(f"{node.lineno}: from {node.module} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if a.name in SWARM_IMPLEMENTATIONS]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
            if node.func.id in ("isinstance", "issubclass") and len(node.args) == 2:
                named = {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node.args[1])
                         if isinstance(n, (ast.Name, ast.Attribute))}
                if any(n.endswith("Transport") or n in IMPLEMENTATION_NAMES for n in named) \
                        or "transport" in ast.unparse(node.args[0]).lower():
                    found.append(f"{node.lineno}: {ast.unparse(node)}")
            elif node.func.id in ("getattr", "hasattr", "type") and "transport" in ast.unparse(node.args[0]).lower():
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_node_never_tells_transports_apart():
    """node/ calls its transport's interface, side channels included (Transport.open_weights, open_score_link,
    open_averager), and never asks which transport it holds: only ops/ (the CLI) and the bench construct one."""
    bad = {m: found for m, path in _modules().items() if m.split(".")[0] == "node"
           if (found := transport_side_doors(ast.parse(path.read_text())))}
    assert not bad, f"node/ picking a swarm implementation by itself: {bad}"


def test_the_side_door_check_sees_each_kind():
    code = ("from swarm.exchange.twin import InMemoryTransport\n"
            "def f(node):\n"
            "    from swarm.weights.hivemind import HivemindWeights\n"
            "    from swarm.exchange.score_stream import MemoryScoreLink, ScoreFailed\n"
            "    a = isinstance(node.transport, InMemoryTransport)\n"
            "    b = getattr(node.transport, 'dht', None)\n"
            "    c = isinstance(x, (int, swarm.exchange.hivemind.HivemindTransport))\n"
            "    d = node.transport.open_score_link(max_bytes=1, timeout_s=1.0)\n")
    assert [f.split(":")[0] for f in transport_side_doors(ast.parse(code))] == ["1", "3", "4", "5", "6", "7"]
    assert transport_side_doors(ast.parse("from swarm.exchange.score_stream import ScoreFailed\n"
                                          "from swarm.exchange.transport import Transport\n")) == []


def test_unit_tests_live_in_their_rooms():
    """tests/unit holds one folder per room it tests (protocols, losses, swarm, node, ops, bench); only the
    whole-repository checks sit at its top."""
    top = sorted(p.name for p in (ROOT / "tests" / "unit").glob("test_*.py"))
    assert top == ["test_architecture.py", "test_maps.py"], f"unit tests outside a room's folder: {top}"
    rooms = sorted(p.name for p in (ROOT / "tests" / "unit").iterdir() if p.is_dir() and p.name != "__pycache__")
    assert rooms == sorted(["bench", "losses", "node", "ops", "protocols", "swarm"])
