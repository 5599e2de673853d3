"""YAML bytes to documents for `noderoll validate`, with what a person needs to fix them. Pure (no I/O).

PyYAML's safe loader builds the documents; on top of it, per document: the line where it starts
and the line of each field (by the dotted path `api.problems.field_path` uses, `spec.env[0].name`),
the text as written of every non-string scalar (`version: 1.10` is read as the float 1.1; the
hint quotes `1.10`), and duplicated mapping keys, which YAML loaders resolve silently (the last
wins) and which are refused here. Bytes that are not text (a binary file, invalid UTF-8) and YAML
syntax errors are one problem for the file, with the line when known; the documents before a
syntax error are still returned.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field
from typing import Any

import yaml

# libyaml's loader when PyYAML was built with it: 70 times faster on a 10 MB file, same nodes and marks.
LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MERGE_TAG = "tag:yaml.org,2002:merge"
STR_TAG = "tag:yaml.org,2002:str"


@dataclass(frozen=True)
class Duplicate:
    """A mapping key given twice in one mapping."""

    path: str
    first_line: int
    line: int


@dataclass
class SourceDocument:
    """One YAML document: its data and where its parts are in the file (1-based lines)."""

    index: int
    line: int
    data: Any
    lines: dict[str, int] = field(default_factory=dict)
    # Field path -> the text as written, for scalars YAML did not read as strings.
    scalars: dict[str, str] = field(default_factory=dict)
    duplicates: list[Duplicate] = field(default_factory=list)

    def line_of(self, path: str) -> int:
        """The line of `path`, else of its nearest parent present, else where the document starts."""
        while path:
            if path in self.lines:
                return self.lines[path]
            cut = max(path.rfind("."), path.rfind("["))
            path = path[:cut] if cut > 0 else ""
        return self.line


@dataclass(frozen=True)
class SourceProblem:
    """Why a file (or its rest, from `line` on) could not be read as YAML."""

    message: str
    line: int | None = None


@dataclass
class ParsedSource:
    """The documents of one file (empty ones left out) and the problem that stopped reading, if any."""

    documents: list[SourceDocument] = field(default_factory=list)
    problem: SourceProblem | None = None


def decode(raw: bytes) -> tuple[str | None, SourceProblem | None]:
    """The text of `raw` (UTF-8, or UTF-16 with a byte order mark, as YAML allows), or why it is not text."""
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            return raw.decode("utf-16"), None
        except UnicodeDecodeError as err:
            return None, SourceProblem(f"not text: invalid UTF-16 at byte {err.start}")
    if b"\x00" in raw:
        return None, SourceProblem(f"not a YAML text file: binary content (a NUL byte at offset {raw.index(0)})")
    try:
        return raw.decode("utf-8-sig"), None
    except UnicodeDecodeError as err:
        byte = raw[err.start]
        return None, SourceProblem(f"not a YAML text file: binary content (byte 0x{byte:02x} at offset {err.start}"
                                   " is not UTF-8)")


def parse(raw: bytes) -> ParsedSource:
    """Every document of a YAML file (module rules)."""
    text, problem = decode(raw)
    if text is None:
        return ParsedSource(problem=problem)
    result = ParsedSource()
    loader = LOADER(text)
    try:
        index = 0
        while loader.check_node():
            node = loader.get_node()
            index += 1
            if node is None:
                continue
            document = SourceDocument(index=index, line=node.start_mark.line + 1, data=None)
            _walk(loader, node, "", document, set())
            document.data = loader.construct_document(node)
            if document.data is not None:  # an empty document (`---` alone) holds nothing to check
                result.documents.append(document)
    except yaml.MarkedYAMLError as err:
        result.problem = _syntax_problem(err)
    except yaml.YAMLError as err:
        result.problem = SourceProblem(f"YAML error: {err}")
    finally:
        loader.dispose()
    return result


def _syntax_problem(err: yaml.MarkedYAMLError) -> SourceProblem:
    mark = err.problem_mark or err.context_mark
    message = f"YAML syntax error{f', column {mark.column + 1}' if mark is not None else ''}: "
    message += err.problem or err.context or "not YAML"
    if err.problem and err.context:
        started = f" started on line {err.context_mark.line + 1}" if err.context_mark is not None else ""
        message += f" ({err.context}{started})"
    return SourceProblem(message, mark.line + 1 if mark is not None else None)


def _walk(loader: Any, node: yaml.Node, path: str, doc: SourceDocument, seen: set[int]) -> None:
    # Aliases make the node graph a DAG (or a cycle): each node is walked once.
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                continue  # merged keys may be overridden (YAML's rule); complex keys are PyYAML's concern
            key = loader.construct_object(key_node)
            child = f"{path}.{key}" if path else str(key)
            line = key_node.start_mark.line + 1
            try:
                if key in first:
                    doc.duplicates.append(Duplicate(child, first[key], line))
                else:
                    first[key] = line
            except TypeError:
                continue  # an unhashable key: construct_document reports it
            doc.lines.setdefault(child, line)
            _walk(loader, value_node, child, doc, seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            child = f"{path}[{i}]"
            doc.lines.setdefault(child, item.start_mark.line + 1)
            _walk(loader, item, child, doc, seen)
    elif isinstance(node, yaml.ScalarNode) and node.tag != STR_TAG and path:
        doc.scalars[path] = node.value
