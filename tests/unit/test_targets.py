"""Toleration semantics of the per-node targeting rules (planning/node/targets.py); the rules applied to
nodes and Packages are tested through the fleet's selection (test_fleet_targets.py)."""

from __future__ import annotations

import pytest

from api.package import Toleration
from planning.node.targets import tolerates


def taint(key: str, effect: str = "NoSchedule", value: str = "") -> dict[str, str]:
    return {"key": key, "value": value, "effect": effect}


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        pytest.param(Toleration(operator="Exists"), True, id="empty-key-exists-tolerates-all"),
        pytest.param(Toleration(key="k", operator="Exists"), True, id="key-exists"),
        pytest.param(Toleration(key="k", value="v"), True, id="key-value-equal"),
        pytest.param(Toleration(key="k", value="w"), False, id="other-value"),
        pytest.param(Toleration(key="k", operator="Exists", effect="NoExecute"), False, id="other-effect"),
    ],
)
def test_toleration_semantics(toleration: Toleration, expected: bool) -> None:
    assert tolerates(toleration, taint("k", value="v")) is expected

