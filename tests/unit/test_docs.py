"""The README is a front page, and the docs it leads to hold together (issue #24, item 2).

What a reader relies on and a refactoring could break without anyone running a command: the first
lines give the two commands, the README stays short and shows the picture inline, every relative
link and anchor of the README and of the guides resolves, and the phases the Temporal UI section
lists are the ones the workflows upsert. (The docs' commands themselves are run by
tests/integration/test_doc_commands.py.)
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from api.enums import RolloutPhase

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
GUIDES = [README, *(ROOT / "docs" / n for n in ("getting-started.md", "how-it-works.md", "operations.md",
                                                "testing.md", "migration-from-nodewright.md"))]
MAX_README_LINES = 200


def test_the_first_lines_give_the_two_commands() -> None:
    lines = README.read_text().splitlines()
    assert lines[0] == "# noderoll" and lines[2].startswith("```") and lines[5] == "```", lines[:6]
    assert lines[3:5] == ["scripts/noderoll demo", "scripts/test"]
    # CI runs exactly the README's test command.
    assert "exec scripts/test" in (ROOT / ".ci" / "run").read_text()


def test_the_readme_is_a_front_page() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= MAX_README_LINES
    assert "](docs/images/architecture.svg)" in text and (ROOT / "docs/images/architecture.svg").is_file()
    for doc in ("getting-started", "how-it-works", "operations", "api", "architecture", "benchmarks", "testing"):
        assert f"](docs/{doc}.md" in text, doc
    # The per-Package engine is being deleted (issue #25): the front page does not send anyone to it.
    assert "package/<" not in text and "budget/" not in text


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of the headings of a Markdown file."""
    anchors = set()
    in_code = False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            heading = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", heading).replace(" ", "-"))
    return anchors


@pytest.mark.parametrize("doc", GUIDES, ids=lambda p: p.name)
def test_relative_links_and_anchors_resolve(doc: Path) -> None:
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (doc.parent / path).resolve() if path else doc
        if not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(target)
    assert not broken, broken


def _documented_phases(label: str) -> set[str]:
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text[text.index("### In the Temporal UI"):text.index("### A rollout that does not move")]
    sentence = section[section.index(label):]
    sentence = sentence[:sentence.index(".")]
    return set(re.findall(r"`(\w+)`", sentence)) - {"NoderollPhase"}


def test_the_temporal_ui_section_lists_the_phases_the_workflows_upsert() -> None:
    fleet_sources = [*(ROOT / "planning" / "fleet").glob("*.py"), ROOT / "planning" / "rollout" / "fleet_rollback.py"]
    fleet = {RolloutPhase[n].value for p in fleet_sources for n in re.findall(r"RolloutPhase\.([A-Z_]+)", p.read_text())}
    assert _documented_phases("`NoderollPhase` of a fleet") == fleet
    node_sources = [p for p in (ROOT / "workflows").glob("node*.py")]
    node = {m for p in node_sources for m in re.findall(r"set_phase\(\"(\w+)\"\)", p.read_text())}
    documented = _documented_phases("Of a node window")
    # The rest are set only by the per-Package requests' loop (being deleted, issue #25).
    assert documented <= node and node - documented <= {"Erroring", "Waiting"}, (documented, node)
