"""Render docs/images/architecture.yaml (boxes and arrows) to docs/images/architecture.svg. Pure but for the files.

    .venv/bin/python scripts/gen_architecture_svg.py          # write the SVG
    .venv/bin/python scripts/gen_architecture_svg.py --check  # exit 1 when the SVG is not current

A few lines of Python instead of Graphviz: the test bed installs nothing for it, the output is
byte-for-byte reproducible (no tool version in it), and tests/unit/test_architecture_picture.py
regenerates it and compares it with the committed file.
"""

from __future__ import annotations

import sys
from html import escape
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "docs" / "images" / "architecture.yaml"
TARGET = ROOT / "docs" / "images" / "architecture.svg"
FONT = "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\""
TITLE_SIZE, LINE_SIZE, LABEL_SIZE = 13, 11.5, 11
LINE_HEIGHT = 15
# Average advance of a character of these fonts, in em: what `fits` measures text with.
CHAR_EM = 0.6
ARCHITECTURE_TITLE = ("noderoll: Packages and DeploymentPolicies become fleet rollouts in Temporal, "
                      "run node by node by the worker")
STYLE = {
    "group": 'fill="#f3f6fb" stroke="#8aa2c8" stroke-dasharray="5 3"',
    "box": 'fill="#ffffff" stroke="#34495e"',
    "shadow": 'fill="#ffffff" stroke="#34495e" opacity="0.6"',
}


def text_width(text: str, size: float) -> float:
    """Estimated width of `text` at font size `size` (pixels)."""
    return len(text) * size * CHAR_EM


def box_lines(box: dict[str, Any]) -> list[tuple[str, float]]:
    """(text, font size) of everything written in a box, title first."""
    title = [(box["title"], TITLE_SIZE)] if box.get("title") else []
    return title + [(line, LINE_SIZE) for line in box.get("lines", [])]


def fits(box: dict[str, Any]) -> list[str]:
    """The lines of `box` wider than the box (with 8 px of margin each side), for the test."""
    return [text for text, size in box_lines(box) if text_width(text, size) > box["w"] - 16]


def _box(box: dict[str, Any]) -> list[str]:
    kind = "group" if box.get("group") else "shadow" if box.get("shadow") else "box"
    out = [f'<rect x="{box["x"]}" y="{box["y"]}" width="{box["w"]}" height="{box["h"]}" rx="6" {STYLE[kind]}/>']
    if box.get("group"):
        out.append(f'<text x="{box["x"] + 10}" y="{box["y"] + 20}" {FONT} font-size="{TITLE_SIZE}" '
                   f'font-weight="bold" fill="#2c3e50">{escape(box["title"])}</text>')
        return out
    y = box["y"] + 20
    centre = box["x"] + box["w"] / 2
    for index, (text, size) in enumerate(box_lines(box)):
        weight = ' font-weight="bold"' if index == 0 and box.get("title") else ""
        out.append(f'<text x="{centre:g}" y="{y}" {FONT} font-size="{size:g}" text-anchor="middle"{weight} '
                   f'fill="#2c3e50">{escape(text)}</text>')
        y += LINE_HEIGHT
    return out


def _arrow(arrow: dict[str, Any]) -> list[str]:
    points = " ".join(f"{x},{y}" for x, y in arrow["points"])
    out = [f'<polyline points="{points}" fill="none" stroke="#c0392b" stroke-width="1.6" marker-end="url(#head)"/>']
    if arrow.get("label"):
        x, y = arrow["at"]
        out.append(f'<text x="{x}" y="{y}" {FONT} font-size="{LABEL_SIZE}" fill="#c0392b">'
                   f'{escape(arrow["label"])}</text>')
    return out


def render(source: dict[str, Any]) -> str:
    """The SVG document of `source` (the parsed YAML). Pure."""
    width, height = source["size"]
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
        f"<title>{escape(source.get('title', ARCHITECTURE_TITLE))}</title>",
        '<defs><marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#c0392b"/></marker></defs>',
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
    ]
    boxes = source["boxes"]
    for box in [b for b in boxes if b.get("group")] + [b for b in boxes if not b.get("group")]:
        out += _box(box)
    for arrow in source["arrows"]:
        out += _arrow(arrow)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def load() -> dict[str, Any]:
    """The picture's source."""
    data: dict[str, Any] = yaml.safe_load(SOURCE.read_text())
    return data


def write_or_check(svg: str, target: Path, argv: list[str]) -> int:
    """Write `svg` to `target`, or with --check in `argv` say whether it is current (exit code 1 when not)."""
    if "--check" in argv:
        current = target.exists() and target.read_text() == svg
        print(f"{target.relative_to(ROOT)} is {'current' if current else 'NOT current: run this script'}")
        return 0 if current else 1
    target.write_text(svg)
    print(f"wrote {target.relative_to(ROOT)}")
    return 0


def main(argv: list[str]) -> int:
    """Write the SVG, or with --check say whether it is current."""
    return write_or_check(render(load()), TARGET, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
