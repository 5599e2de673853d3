"""`noderoll validate FILE...`: lint Package and DeploymentPolicy YAML like the bridge would.

Reads the files (the only I/O), validates every noderoll document with the same models and
cross-document checks the bridge runs (`api/validation.py`), all files together so `dependsOn`
and policy references resolve, prints one line per problem as `file: kind/name: field: message`
and exits 1 when any document is invalid (2 when a file cannot be read or parsed).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from api import keys
from api.validation import validate_documents


def _load(paths: list[str]) -> tuple[list[tuple[str, Mapping[str, Any]]], list[str]]:
    docs: list[tuple[str, Mapping[str, Any]]] = []
    errors: list[str] = []
    for path in paths:
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
            for doc in yaml.safe_load_all(text):
                if isinstance(doc, Mapping):
                    docs.append((path, doc))
                elif doc is not None:
                    errors.append(f"{path}: document is not a mapping")
        except (OSError, yaml.YAMLError) as err:
            errors.append(f"{path}: cannot read: {err}")
    return docs, errors


def run(args: argparse.Namespace) -> int:
    """Validate the files in `args.files`; returns the exit code."""
    docs, errors = _load(args.files)
    result = validate_documents((doc for _, doc in docs), policies_known=not args.no_policy_check)
    # Map each problem back to the file of its document (kind + name); unnamed ones to the first match.
    origin: dict[tuple[str, str], str] = {}
    for path, doc in docs:
        name = str((doc.get("metadata") or {}).get("name") or "")
        origin.setdefault((str(doc.get("kind", "")), name), path)
    for line in errors:
        print(line, file=sys.stderr)
    for problem in result.problems:
        path = origin.get((problem.kind, problem.name), args.files[0] if args.files else "-")
        print(f"{path}: {problem}")
    if not args.quiet:
        count = sum(1 for _, d in docs if str(d.get("apiVersion", "")).startswith(keys.GROUP + "/"))
        verdict = "invalid" if result.problems else "valid"
        print(f"{count} noderoll document(s) checked: {verdict}", file=sys.stderr)
    if errors:
        return 2
    return 1 if result.problems else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `noderoll validate`."""
    parser = subparsers.add_parser(
        "validate",
        help="validate Package and DeploymentPolicy YAML files (a lint for GitOps CI)",
        description=(
            "Validate Package and DeploymentPolicy documents with the checks the bridge runs. "
            "All files are checked together so dependsOn and deploymentPolicy references resolve. "
            "Prints 'file: kind/name: field: message' per problem; exit 1 when any is invalid."
        ),
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="YAML files (multi-document); '-' for stdin")
    parser.add_argument(
        "--no-policy-check",
        action="store_true",
        help="do not require the DeploymentPolicy a Package names to be among the files",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="print problems only")
    parser.set_defaults(func=run)
