"""`noderoll import FILE...`: NodeWright (Skyhook) manifests as noderoll Packages and DeploymentPolicies.

Reads the files (the only input I/O; `-` is stdin) with `api.yaml_source`, as `noderoll validate`
does, converts them with `api.nodewright_import` and writes the noderoll documents as YAML: on
stdout (one stream, each document headed by a comment naming its source), or with `-o DIR` one
file per object, `DIR/<kind>-<name>.yaml` (`deploymentpolicy-foo.yaml`, `package-a.yaml`; an
existing file is replaced). Policies come first, then Packages with each dependency before its
dependents, so `kubectl apply -f` creates them in order. On stderr, one line per field not
carried, object not imported or note: `file:line: Kind/name: field: not carried: why`; then,
without `--quiet`, the documents skipped (not NodeWright objects) and a summary.
Exit 0: every NodeWright object was imported (lines name the fields left out); 1: an object, or
a package of a Skyhook, was not imported, or the input holds no NodeWright object; 2: a file cannot
be read or is not YAML (nothing is written then), or the options do not fit the input.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from api.nodewright_import import (
    ImportOptions,
    ImportResult,
    ImportUsageError,
    NameStyle,
    Severity,
    import_documents,
)
from api.validate_command import STDIN, read_file
from api.yaml_source import ParsedSource, SourceDocument, SourceProblem, parse

EXIT_NOT_IMPORTED = 1
EXIT_UNREADABLE = 2


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line strings (config files stay readable)."""


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|" if "\n" in data else None)


_Dumper.add_representer(str, _represent_str)


def render(document: dict[str, Any]) -> str:
    """One document as YAML (keys in the order written, multi-line strings as blocks)."""
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=2**31)


@dataclass(frozen=True)
class _Input:
    path: str
    source: SourceDocument


def _shown(path: str) -> str:
    return "<stdin>" if path == STDIN else path


def _read(paths: list[str]) -> tuple[list[_Input], list[str]]:
    inputs, errors = [], []
    for path in paths:
        raw, reason = read_file(path)
        parsed = ParsedSource(problem=SourceProblem(reason)) if raw is None else parse(raw)
        inputs += [_Input(path, source) for source in parsed.documents]
        if parsed.problem is not None:
            where = f":{parsed.problem.line}" if parsed.problem.line else ""
            errors.append(f"{_shown(path)}{where}: {parsed.problem.message}")
    return inputs, errors


def options_from(args: argparse.Namespace) -> ImportOptions:
    """ImportOptions from the command line (`--policy-name OLD=NEW`, or one bare `NEW`)."""
    renames: dict[str, str] = {}
    bare: list[str] = []
    for entry in args.policy_name or []:
        old, sep, new = entry.partition("=")
        if sep:
            renames[old] = new
        else:
            bare.append(entry)
    if len(bare) > 1:
        raise ImportUsageError(f"--policy-name without OLD= given {len(bare)} times; write --policy-name SKYHOOK=NAME")
    return ImportOptions(NameStyle(args.names), renames, bare[0] if bare else None, args.paused)


def _report(inputs: list[_Input], result: ImportResult, quiet: bool) -> None:
    for note in result.notes:
        item = inputs[note.source]
        print(f"{_shown(item.path)}:{item.source.line_of(note.field)}: {note}", file=sys.stderr)
    for item in inputs:
        for dup in item.source.duplicates:
            print(f"{_shown(item.path)}:{dup.line}: {dup.path}: note: given twice (lines {dup.first_line} and "
                  f"{dup.line}); YAML keeps the last, and so does this import", file=sys.stderr)
    if quiet:
        return
    for skipped in result.skipped:
        item = inputs[skipped.source]
        what = f"{skipped.kind or '<no kind>'}/{skipped.name or '<unnamed>'}"
        print(f"{_shown(item.path)}:{item.source.line_of(skipped.at)}: skipped {what} (apiVersion {skipped.api_version or 'missing'}: "
              "not a NodeWright object)", file=sys.stderr)
    kinds = [doc.document["kind"] for doc in result.documents]
    counts = {s: sum(1 for n in result.notes if n.severity is s) for s in Severity}
    print(f"{result.read} NodeWright object(s) read: {kinds.count('Package')} Package(s) and "
          f"{kinds.count('DeploymentPolicy')} DeploymentPolicy(ies) written; {counts[Severity.NOT_CARRIED]} field(s) "
          f"not carried, {counts[Severity.NOT_IMPORTED]} not imported, {counts[Severity.NOTE]} note(s); "
          f"{len(result.skipped)} document(s) skipped", file=sys.stderr)


def _write(inputs: list[_Input], result: ImportResult, out_dir: str | None) -> None:
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    for index, item in enumerate(result.documents):
        origin = f"# from {_shown(inputs[item.source].path)}: {item.kind}/{item.name}"
        text = f"{origin}{f' ({item.at})' if item.at else ''}\n{render(item.document)}"
        if out_dir is None:
            sys.stdout.write(("---\n" if index else "") + text)
        else:
            name = f"{item.document['kind'].lower()}-{item.document['metadata']['name']}.yaml"
            (Path(out_dir) / name).write_text(text)


def run(args: argparse.Namespace) -> int:
    """Import the files in `args.files`; returns the exit code."""
    inputs, errors = _read(args.files)
    for line in errors:
        print(line, file=sys.stderr)
    if errors:
        print("nothing written: fix the files above first", file=sys.stderr)
        return EXIT_UNREADABLE
    try:
        result = import_documents([item.source.data for item in inputs], options_from(args))
    except ImportUsageError as err:
        print(f"noderoll import: {err}", file=sys.stderr)
        return EXIT_UNREADABLE
    _report(inputs, result, args.quiet)
    if result.read == 0:
        print("no NodeWright object in the input (Skyhook, NodeWright or DeploymentPolicy of skyhook.nvidia.com or "
              "nodewright.nvidia.com)", file=sys.stderr)
        return EXIT_NOT_IMPORTED
    _write(inputs, result, args.output_dir)
    return EXIT_NOT_IMPORTED if result.failed else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `noderoll import`."""
    parser = subparsers.add_parser(
        "import",
        help="convert NodeWright (Skyhook) manifests to noderoll Packages and DeploymentPolicies",
        description=(
            "Read NodeWright Skyhook, NodeWright and DeploymentPolicy manifests (skyhook.nvidia.com, "
            "nodewright.nvidia.com) and write the equivalent noderoll Packages (one per Skyhook package) and "
            "DeploymentPolicies as YAML. Each field that cannot be carried is named on stderr with the reason "
            "('file:line: Kind/name: field: not carried: why'). The mapping: docs/migration-from-nodewright.md. "
            "Exit 0: all imported; 1: an object or package was not imported; 2: unreadable input or bad options."
        ),
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="YAML files (multi-document, Lists); '-' for stdin")
    parser.add_argument("-o", "--output-dir", metavar="DIR",
                        help="write one file per object into DIR (<kind>-<name>.yaml) instead of stdout")
    parser.add_argument("--names", choices=[s.value for s in NameStyle], default=NameStyle.PACKAGE.value,
                        help="Package names: 'package' (package a of Skyhook foo is Package a; default) or "
                             "'skyhook-package' (foo-a)")
    parser.add_argument("--policy-name", action="append", metavar="[OLD=]NEW",
                        help="name the DeploymentPolicy of Skyhook OLD's interruptionBudget, or rename "
                             "DeploymentPolicy OLD, as NEW (references follow); a bare NEW names the one policy "
                             "made from an interruptionBudget. Repeatable.")
    parser.add_argument("--paused", action="store_true",
                        help="write every Package with spec.paused: true (apply, check, then unpause)")
    parser.add_argument("-q", "--quiet", action="store_true", help="print the per-field lines only")
    parser.set_defaults(func=run)
