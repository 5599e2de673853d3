"""Render docs/images/window-timeline.yaml to docs/images/window-timeline.svg. Pure but for the files.

    .venv/bin/python scripts/gen_window_timeline_svg.py          # write the SVG
    .venv/bin/python scripts/gen_window_timeline_svg.py --check  # exit 1 when the SVG is not current

The picture of a node window in docs/how-it-works.md ("Living with GPU jobs"), drawn by the architecture
picture's renderer (scripts/gen_architecture_svg.py: the same boxes and arrows, byte-for-byte
reproducible); tests/unit/test_window_timeline_picture.py regenerates it and compares.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "docs" / "images" / "window-timeline.yaml"
TARGET = ROOT / "docs" / "images" / "window-timeline.svg"


def renderer() -> ModuleType:
    """scripts/gen_architecture_svg.py as a module (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location("gen_architecture_svg", Path(__file__).parent / "gen_architecture_svg.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load() -> dict[str, Any]:
    """The picture's source."""
    data: dict[str, Any] = yaml.safe_load(SOURCE.read_text())
    return data


def main(argv: list[str]) -> int:
    """Write the SVG, or with --check say whether it is current."""
    draw = renderer()
    return int(draw.write_or_check(draw.render(load()), TARGET, argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
