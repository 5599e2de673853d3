"""Kubernetes resource quantities (`500m`, `1Gi`, `2`): parse to a number for comparisons. Pure."""

from __future__ import annotations

import re
from decimal import Decimal

_QUANTITY_RE = re.compile(
    r"^(?P<num>[+]?(\d+(\.\d*)?|\.\d+))(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$"
)
_FACTORS = {
    None: Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
QUANTITY_HINT = "a Kubernetes quantity such as 500m, 2, 256Mi or 1Gi"


def parse_quantity(text: str | int | float) -> Decimal:
    """The value of a quantity in base units, or ValueError saying what is valid."""
    raw = str(text)
    match = _QUANTITY_RE.match(raw)
    if match is None:
        raise ValueError(f"{raw!r} is not a valid quantity; use {QUANTITY_HINT}")
    return Decimal(match["num"]) * _FACTORS[match["suffix"]]
