"""docs/CONFIG.md is generated from the config models and must not drift from them."""

from pathlib import Path

from ops.cli.config_doc import render

DOC = Path(__file__).resolve().parents[3] / "docs" / "CONFIG.md"


def test_config_reference_is_up_to_date():
    assert DOC.read_text() == render(), "regenerate it: swarm config doc > docs/CONFIG.md"


def test_every_section_and_loss_is_documented():
    text = render()
    for section in ("`model`", "`tasks`", "`generation`", "`train`", "`select`", "`ingest`", "`swarm`",
                    "`swarm.caps`", "`checkpoint`", "`metrics`", "`eval`"):
        assert f"## {section} —" in text, section
    for name in ("grpo", "pg", "f-tis", "gspo", "gepo"):
        assert "| `name` | Literal[" in text and f"'{name}'" in text
