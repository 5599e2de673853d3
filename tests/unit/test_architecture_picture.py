"""The README's architecture picture is generated from its source and is current.

docs/images/architecture.svg is what scripts/gen_architecture_svg.py renders from
docs/images/architecture.yaml; this test renders it again and compares, so an edit of the source
without regenerating (or a hand edit of the SVG) fails. It also checks what a renderer would not:
text that overflows its box, shapes off the canvas, and names that are not the contract's.
"""

from __future__ import annotations

import importlib.util
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from protocol import names

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_architecture_svg", ROOT / "scripts" / "gen_architecture_svg.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def source(gen: ModuleType) -> dict[str, Any]:
    data: dict[str, Any] = gen.load()
    return data


def test_the_committed_svg_is_what_the_source_renders(gen: ModuleType, source: dict[str, Any]) -> None:
    assert gen.TARGET.read_text() == gen.render(source), "run: .venv/bin/python scripts/gen_architecture_svg.py"
    ET.fromstring(gen.TARGET.read_text())  # well-formed XML
    assert gen.main(["--check"]) == 0


def test_text_fits_its_box_and_everything_is_on_the_canvas(gen: ModuleType, source: dict[str, Any]) -> None:
    width, height = source["size"]
    for box in source["boxes"]:
        assert gen.fits(box) == [], f"{box['id']}: text wider than the box"
        assert 0 <= box["x"] and box["x"] + box["w"] <= width and 0 <= box["y"] and box["y"] + box["h"] <= height, box
    for arrow in source["arrows"]:
        assert all(0 <= x <= width and 0 <= y <= height for x, y in arrow["points"]), arrow
        x, _ = arrow["at"]
        assert x + gen.text_width(arrow["label"], gen.LABEL_SIZE) <= width, arrow


def test_the_picture_speaks_the_contract(source: dict[str, Any]) -> None:
    titles = {box.get("title", "") for box in source["boxes"]}
    assert f"{names.FLEET_WORKFLOW_PREFIX}<policy>" in titles and f"{names.NODE_WORKFLOW_PREFIX}<node>" in titles
    assert {"Package", "DeploymentPolicy", "noderoll worker", "noderoll bridge"} <= titles
    steering = next(a["label"] for a in source["arrows"] if "pause" in a["label"])
    assert set(re.findall(r"\w+", steering)) == {names.SIGNAL_PAUSE, names.SIGNAL_RESUME, names.SIGNAL_HALT,
                                                  names.SIGNAL_RETRY, names.QUERY_PROGRESS}
