"""The picture of a node window (docs/images/window-timeline.svg, docs/how-it-works.md "Living with GPU jobs")
is generated from its source, current, readable (text inside its boxes, on the canvas) and speaks the
contract's names."""

from __future__ import annotations

import importlib.util
import xml.etree.ElementTree as ET
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from api import keys

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_window_timeline_svg",
                                                  ROOT / "scripts" / "gen_window_timeline_svg.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_svg_is_what_the_source_renders(gen: ModuleType) -> None:
    assert gen.TARGET.read_text() == gen.renderer().render(gen.load()), \
        "run: .venv/bin/python scripts/gen_window_timeline_svg.py"
    ET.fromstring(gen.TARGET.read_text())
    assert gen.main(["--check"]) == 0
    assert "](images/window-timeline.svg)" in (ROOT / "docs" / "how-it-works.md").read_text()


def test_text_fits_and_everything_is_on_the_canvas(gen: ModuleType) -> None:
    source: dict[str, Any] = gen.load()
    draw = gen.renderer()
    width, height = source["size"]
    for box in source["boxes"]:
        assert draw.fits(box) == [], f"{box['id']}: text wider than the box"
        assert 0 <= box["x"] and box["x"] + box["w"] <= width and 0 <= box["y"] and box["y"] + box["h"] <= height, box
    for arrow in source["arrows"]:
        assert all(0 <= x <= width and 0 <= y <= height for x, y in arrow["points"]), arrow


def test_the_window_in_order_with_the_contract_names(gen: ModuleType) -> None:
    boxes = gen.load()["boxes"]
    order = [b["title"].split(" ")[0] for b in boxes if b["x"] == 60]
    assert order == ["cordon", "notice", "eviction", "stages", "interrupt", "post-interrupt", "verify", "uncordon"]
    text = " ".join(line for b in boxes for line in b.get("lines", []))
    for name in (keys.EVICTION_AT_ANNOTATION, keys.CONDITION_MAINTENANCE_SCHEDULED, f"{keys.SKIPPED_LABEL}=drain-timeout",
                 "Evict", "WaitForCompletion", "Delete", "Leave", "noderoll retry --nodes"):
        assert name in text, name
