"""Finding 9 (drop reasons): docs/PROTOCOL.md §8.1 lists every drop reason the code can count, and
nothing else. Before, `bad_token_id`, `task_not_allowed`, `unknown_dataset`, `future_timestamp`
and `stale_age` were counted but undocumented.

Reasons are found in the source where they are raised or counted: `RecordError("…")`,
`TaskError("…")`, `WeightsRejected("…")`, `drops["…"]`, `.drop(…, "…")`, `reason = … "…"`,
and the `return "…"` of the ingest checks, of the HeteroRL learner's staleness check and of the gossip
guard's verdicts. A new reason in any of those forms fails this test until the table has it.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATTERNS = [
    r'(?:RecordError|_BundleError|TaskError|WeightsRejected)\(\s*"([a-z_]+)"',
    r'drops\[\s*"([a-z_]+)"\s*\]',
    r'\.drop\([^)\n]*?"([a-z_]+)"\s*\)',
]
REASON_LINE = re.compile(r'^\s*(?:reason|outcome|fail_reason)\b[^=\n]*=[^\n]*$', re.M)
NOT_REASONS = {"ok", "not_found", "bad_request"}  # stream statuses (§6), not counted drops


def code_reasons() -> set[str]:
    found: set[str] = set()
    for pkg in ("protocols", "swarm", "node"):
        for path in (ROOT / pkg).rglob("*.py"):
            text = path.read_text()
            for pattern in PATTERNS:
                found |= set(re.findall(pattern, text))
            for line in REASON_LINE.findall(text):
                found |= set(re.findall(r'"([a-z_]+)"', line))
    ingest = (ROOT / "node" / "round" / "ingest.py").read_text()
    found |= set(re.findall(r'return "([a-z_]+)"', ingest))
    learner = (ROOT / "node" / "heterorl" / "learner.py").read_text()  # staleness_reason's returns
    found |= set(re.findall(r'return "([a-z_]+)"', learner))
    guard = (ROOT / "swarm" / "exchange" / "gossip_guard.py").read_text()  # GossipGuard.admit's verdicts
    found |= set(re.findall(r'return "([a-z_]+)"', guard))
    return found - NOT_REASONS


def documented_reasons() -> set[str]:
    doc = (ROOT / "docs" / "PROTOCOL.md").read_text()
    section = doc[doc.index("### 8.1 Drop reasons"):]
    section = section[: section.index("\n## ")]
    return set(re.findall(r"^\| `([a-z_]+)` \|", section, re.M))


def test_every_counted_reason_is_documented_and_every_documented_one_is_counted():
    code, doc = code_reasons(), documented_reasons()
    assert {"bad_token_id", "task_not_allowed", "unknown_dataset", "future_timestamp", "stale_age",
            "completion_too_long", "context_overflow", "ids_text_mismatch", "internal_error"} <= code
    assert code - doc == set(), f"counted but not in docs/PROTOCOL.md §8.1: {sorted(code - doc)}"
    assert doc - code == set(), f"in docs/PROTOCOL.md §8.1 but never counted: {sorted(doc - code)}"


def test_the_fingerprint_is_defined():
    doc = (ROOT / "docs" / "PROTOCOL.md").read_text()
    section = doc[doc.index("### 2.1 Tokenizer fingerprint"):doc.index("## 3. Bundles")]
    assert 'json.dumps(T, sort_keys=True, separators=(",", ":"), ensure_ascii=False)' in section
    assert "tokenizer.json" in section and "padding" in section and "continuing_subword_prefix" in section
