"""Size budget for product modules (style rule 9): warn above 400 lines, fail above 800."""

from __future__ import annotations

import sys
from pathlib import Path

PRODUCT = ["api", "planning", "workflows", "activities", "worker", "cli", "demo", "service", "crd_bridge", "agent", "fleetsim", "localstack", "bench",
           "protocol", "webhook", "metrics", "kube"]
WARN, FAIL = 400, 800


def main() -> int:
    root = Path(__file__).resolve().parent.parent
    failed = False
    for pkg in PRODUCT:
        for path in sorted((root / pkg).rglob("*.py")):
            lines = len(path.read_text().splitlines())
            rel = path.relative_to(root)
            if lines > FAIL:
                print(f"FAIL {rel}: {lines} lines (> {FAIL})")
                failed = True
            elif lines > WARN:
                print(f"warn {rel}: {lines} lines (> {WARN})")
    for path in sorted((root / "tests").rglob("*.py")):
        lines = len(path.read_text().splitlines())
        if lines > FAIL:
            print(f"FAIL {path.relative_to(root)}: {lines} lines (> {FAIL})")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
