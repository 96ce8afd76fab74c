"""The maps on the doors stay true: every module is named in its package's docstring map, and every file path and
every `package.module.name` that docs/ and the README name exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAPPED = ("protocols", "swarm", "node", "ops", "losses", "bench")  # packages whose __init__ docstring maps their modules
TOPS = ("protocols", "swarm", "node", "ops", "losses", "bench")
PATH = re.compile(r"(?<![\w/.-])((?:protocols|swarm|node|ops|losses|bench|tests|docs|examples|docker|tools|\.ci)/[\w./-]*\w)")
NAME = re.compile(r"`((?:protocols|swarm|node|ops|losses|bench)(?:\.\w+)+)(?![\w*])")
FILE_EXT = {"json", "jsonl", "log", "yaml", "key", "py", "md", "txt", "png"}


def unmapped() -> dict[str, list[str]]:
    """package → its modules and subpackages its __init__ docstring does not name."""
    out = {}
    for top in MAPPED:
        for init in sorted((ROOT / top).rglob("__init__.py")):
            pkg = init.parent
            doc = ast.get_docstring(ast.parse(init.read_text())) or ""
            kids = [p.stem for p in pkg.glob("*.py") if p.stem not in ("__init__", "__main__")]
            kids += [d.name for d in pkg.iterdir() if (d / "__init__.py").is_file()]
            missing = sorted(k for k in kids if not re.search(rf"(?<![\w]){re.escape(k)}(?!\w)", doc))
            if missing:
                out[str(pkg.relative_to(ROOT))] = missing
    return out


def _module_file(parts: list[str]) -> Path | None:
    p = ROOT.joinpath(*parts)
    return p.with_suffix(".py") if p.with_suffix(".py").is_file() else \
        (p / "__init__.py" if (p / "__init__.py").is_file() else None)


def _names(body: list) -> dict[str, ast.AST | None]:
    """Top-level names a module (or class body) binds: defs, classes, assignments, imports (also under if/try)."""
    out: dict[str, ast.AST | None] = {}
    for n in body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[n.name] = n
        elif isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                out.update({x.id: None for x in ast.walk(t) if isinstance(x, ast.Name)})
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out.update({(a.asname or a.name).split(".")[0]: None for a in n.names})
        elif isinstance(n, (ast.If, ast.Try)):
            for part in (n.body, n.orelse, *[h.body for h in getattr(n, "handlers", [])]):
                out.update(_names(part))
    return out


def _config_key(parts: list[str]) -> bool:
    """`swarm.wait_s`, `train.loss`: a section of the node config and one of its fields."""
    from node.config import NodeConfig

    field = NodeConfig.model_fields.get(parts[0])
    model = getattr(field, "annotation", None)
    fields = getattr(model, "model_fields", None)
    return len(parts) == 2 and fields is not None and parts[1] in fields


def resolves(dotted: str) -> bool:
    """A module, a name in one (a class's attribute one level down), a node config key, or a file name."""
    parts = dotted.split(".")
    if parts[-1] in FILE_EXT and len(parts) == 2 or _config_key(parts):
        return True
    for i in range(len(parts), 0, -1):
        path = _module_file(parts[:i])
        if path is None:
            continue
        body = ast.parse(path.read_text()).body
        for j, name in enumerate(parts[i:]):
            names = _names(body)
            if name not in names:
                return False
            if not isinstance(names[name], ast.ClassDef):
                return j == len(parts[i:]) - 1 or names[name] is None  # an attribute of a value: not followed
            body = names[name].body
        return True
    return False


def written_by_a_bench(path: str) -> bool:
    """bench/results/FAMILY/NAME.json that a script of bench/FAMILY/ writes (a result not measured here yet, e.g. a
    GPU run)."""
    m = re.fullmatch(r"bench/results/(\w+)/([\w.-]+)\.json", path)
    return bool(m) and (ROOT / "bench" / m.group(1)).is_dir() and any(
        f'"{m.group(2)}"' in text or f'"{m.group(2)}.json"' in text
        for text in (p.read_text() for p in (ROOT / "bench" / m.group(1)).rglob("*.py")))


def stale_references() -> list[str]:
    bad = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for i, line in enumerate(doc.read_text().splitlines(), 1):
            for m in PATH.finditer(line):
                path = m.group(1)
                if not ((ROOT / path).exists() or any(ROOT.glob(path)) or written_by_a_bench(path)):
                    bad.append(f"{doc.name}:{i} path {path}")
            bad += [f"{doc.name}:{i} name {m.group(1)}" for m in NAME.finditer(line) if not resolves(m.group(1))]
    return bad


def test_every_module_is_on_its_package_map():
    assert not unmapped(), f"modules missing from their package's docstring map: {unmapped()}"


def test_every_path_and_name_the_docs_give_exists():
    assert not stale_references(), stale_references()


def test_the_reference_checks_can_fail():
    assert resolves("swarm.exchange.polling.PollPlan") and resolves("swarm.exchange.polling.PollPlan.keys")
    assert resolves("swarm.wait_s")
    assert resolves("protocols.announce.encode_announcement") and resolves("node.json")
    assert not resolves("protocols.codec.encode_announcement")  # it lives in protocols.announce
    assert resolves("node.generation.hf.HFGenerator") and not resolves("node.generation.HFGenerator")
    assert not resolves("swarm.exchange.polling.PollPlan.gone")
    assert not resolves("swarm.not_a_key") and not written_by_a_bench("bench/results/speed/never_written.json")
    assert written_by_a_bench("bench/results/speed/gpu.json") and not written_by_a_bench("bench/results/learning/gpu.json")


def _sections(doc) -> set[str]:
    """The section numbers a benchmarks file holds: "13", "13J", "16D2" from its ## and ### headings."""
    return set(re.findall(r"^#{2,3} (\d+[A-Z]?\d*)\.", doc.read_text(), re.M))


def test_every_benchmark_reference_names_a_section_of_its_file():
    """docs/BENCHMARKS.md is the index of docs/benchmarks/ (one file per bench family); a reference
    `docs/benchmarks/<family>.md §N` anywhere in the repository names a section that file holds."""
    index = (ROOT / "docs" / "BENCHMARKS.md").read_text()
    rows = re.findall(r"^\| (\d+) \| .* \| `docs/benchmarks/(\w+)\.md` \|$", index, re.M)
    assert len(rows) >= 17
    for number, family in rows:
        assert number in _sections(ROOT / "docs" / "benchmarks" / f"{family}.md"), (number, family)
    bad = []
    paths = [*ROOT.glob("*.md"), *(ROOT / "docs").rglob("*.md"), *(ROOT / "examples").rglob("*.yaml"),
             *(p for pkg in ("protocols", "losses", "swarm", "node", "ops", "bench", "tests") for p in (ROOT / pkg).rglob("*.py"))]
    for path in paths:
        for family, number in re.findall(r"docs/benchmarks/(\w+)\.md`? §(\d+[A-Z]?\d*)", path.read_text()):
            target = ROOT / "docs" / "benchmarks" / f"{family}.md"
            if not target.is_file() or (number not in _sections(target) and number.rstrip("0123456789") not in _sections(target)):
                bad.append(f"{path.relative_to(ROOT)}: docs/benchmarks/{family}.md §{number}")
    assert not bad, bad
