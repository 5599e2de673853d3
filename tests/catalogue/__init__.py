"""The catalogue of invalid Package and DeploymentPolicy documents, with the expected messages.

Each `*.yaml` file starts with comment headers:
* `# level: schema` (the CRD schema refuses it: the real apiserver must reject it) or
  `# level: semantic` (only noderoll's models can: the apiserver accepts it, the models refuse);
* `# expect-apiserver: <text>` (schema level): a substring of the apiserver's error; alternatives
  separated by ` || ` where Kubernetes versions word it differently (1.20 drops list indexes from
  field paths, later versions keep them);
* `# expect-model: <field>: <message>`: a substring of one `field: message` problem line of
  `noderoll validate` for the file (all its documents validated together).
Schema-level documents are refused by the models too (the models are at least as strict).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CATALOGUE = Path(__file__).parent


@dataclass(frozen=True)
class Entry:
    """One catalogue file."""

    path: Path
    level: str
    expect_apiserver: str | None
    expect_model: str
    documents: list[dict[str, Any]]

    @property
    def id(self) -> str:
        return self.path.stem

    def apiserver_message_matches(self, message: str) -> bool:
        """True when `message` contains one of the expected apiserver texts."""
        options = (self.expect_apiserver or "").split(" || ")
        return any(option and option in message for option in options)


def load() -> list[Entry]:
    """Every catalogue entry, sorted by file name."""
    entries = []
    for path in sorted(CATALOGUE.glob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        headers: dict[str, str] = {}
        for line in text.splitlines():
            if not line.startswith("#"):
                break
            key, _, value = line[1:].strip().partition(":")
            headers[key.strip()] = value.strip()
        entries.append(
            Entry(
                path=path,
                level=headers["level"],
                expect_apiserver=headers.get("expect-apiserver"),
                expect_model=headers["expect-model"],
                documents=[d for d in yaml.safe_load_all(text) if d],
            )
        )
    return entries
