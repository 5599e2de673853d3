"""`noderoll validate FILE...`: lint Package and DeploymentPolicy YAML like the bridge would.

Reads the files (the only I/O: `-` is stdin), parses them with `api.yaml_source` (binary files,
syntax errors and duplicated keys refused), checks every document with `api.validation` (each on
its own, then all files together so `dependsOn` and policy references resolve) and prints one line
per problem on stdout: `file:line: kind/name: field: message` for a document, `file[:line]: message`
for a file that cannot be read as YAML. Documents of other API groups are listed as skipped and a
summary counts the documents (checked, valid, invalid, skipped) and file errors, both on stderr
(left out with `--quiet`). Exit 0 when every noderoll document is valid, 1 when one is invalid,
2 when a file cannot be read or is not YAML (2 wins over 1).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from api.problems import ValidationProblem
from api.validation import DocumentCheck, check_document, cross_check
from api.yaml_source import ParsedSource, SourceDocument, SourceProblem, parse

STDIN = "-"
# Manifests are small; a bigger file is a mistake (and /dev/zero must not be read forever).
MAX_FILE_BYTES = 64 * 2**20
EXIT_INVALID, EXIT_UNREADABLE = 1, 2


@dataclass
class Located:
    """A parsed document, the file it came from and its check."""

    path: str
    source: SourceDocument
    check: DocumentCheck


def read_file(path: str) -> tuple[bytes | None, str | None]:
    """The bytes of `path` (`-`: stdin), or a one-line reason it cannot be read."""
    try:
        if path == STDIN:
            raw = sys.stdin.buffer.read(MAX_FILE_BYTES + 1)
        else:
            file = Path(path)
            if file.is_dir():
                return None, f"is a directory; give the YAML files in it (for example {path.rstrip('/')}/*.yaml)"
            with file.open("rb") as handle:
                raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        return None, f"cannot read: {err.strerror or err}"
    if len(raw) > MAX_FILE_BYTES:
        return None, f"larger than {MAX_FILE_BYTES // 2**20} MiB; not a manifest"
    return raw, None


def duplicate_problems(check: DocumentCheck, source: SourceDocument) -> list[ValidationProblem]:
    """A problem per duplicated key (YAML would keep only the last value)."""
    return [
        ValidationProblem(check.kind, check.name, dup.path,
                          f"given twice (lines {dup.first_line} and {dup.line}); YAML keeps only the last "
                          "silently: remove one")
        for dup in source.duplicates
    ]


def _name(path: str) -> str:
    return "<stdin>" if path == STDIN else path


def _file_line(path: str, problem: SourceProblem) -> str:
    where = f":{problem.line}" if problem.line else ""
    return f"{_name(path)}{where}: {problem.message}"


def _document_line(doc: Located, problem: ValidationProblem) -> str:
    where = f"{_name(doc.path)}:{doc.source.line_of(problem.field)}"
    if not problem.kind and not problem.name:
        return f"{where}: document {doc.source.index}: {problem.message}"
    return f"{where}: {problem}"


def load(paths: list[str]) -> tuple[list[Located], list[str], list[str]]:
    """Parse and check every document of `paths`: (documents, file error lines, notes)."""
    located: list[Located] = []
    errors: list[str] = []
    notes: list[str] = []
    for path in paths:
        raw, reason = read_file(path)
        parsed = ParsedSource(problem=SourceProblem(reason)) if raw is None else parse(raw)
        for source in parsed.documents:
            check = check_document(source.data, source.scalars)
            check.problems.extend(duplicate_problems(check, source))
            if check.problems:
                check.skipped = False  # a duplicated key is a problem of any YAML document, ours or not
            located.append(Located(path, source, check))
        if parsed.problem is not None:
            errors.append(_file_line(path, parsed.problem))
        elif not parsed.documents:
            notes.append(f"{_name(path)}: no YAML documents (empty)")
    return located, errors, notes


def run(args: argparse.Namespace) -> int:
    """Validate the files in `args.files`; returns the exit code."""
    located, errors, notes = load(args.files)
    cross_check([doc.check for doc in located], policies_known=not args.no_policy_check)
    for line in errors:
        print(line)
    for doc in located:
        for problem in doc.check.problems:
            print(_document_line(doc, problem))
    skipped = [doc for doc in located if doc.check.skipped]
    invalid = sum(1 for doc in located if doc.check.problems)
    if not args.quiet:
        for line in notes:
            print(line, file=sys.stderr)
        for doc in skipped:
            what = f"{doc.check.kind or '<no kind>'}/{doc.check.name or '<unnamed>'}"
            api_version = doc.source.data.get("apiVersion") if isinstance(doc.source.data, dict) else None
            print(f"{_name(doc.path)}:{doc.source.line}: skipped {what} (apiVersion {api_version or 'missing'}: "
                  "not noderoll.io)", file=sys.stderr)
        valid = sum(1 for doc in located if doc.check.valid)
        verdict = "invalid" if invalid or errors else "valid"
        print(f"{len(located)} document(s) checked: {valid} valid, {invalid} invalid, {len(skipped)} skipped; "
              f"{len(errors)} file error(s): {verdict}", file=sys.stderr)
    if errors:
        return EXIT_UNREADABLE
    return EXIT_INVALID if invalid else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `noderoll validate`."""
    parser = subparsers.add_parser(
        "validate",
        help="validate Package and DeploymentPolicy YAML files (a lint for GitOps CI)",
        description=(
            "Validate Package and DeploymentPolicy documents with the checks the bridge runs, and what "
            "YAML hides (duplicated keys, unquoted versions read as numbers, a near miss of the "
            "noderoll.io API group, a config too big for a ConfigMap). All files are checked together "
            "so dependsOn and deploymentPolicy references resolve. Prints 'file:line: kind/name: field: "
            "message' per problem; documents of other API groups are listed as skipped. Exit 0: all "
            "valid; 1: a document is invalid; 2: a file cannot be read or is not YAML."
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
