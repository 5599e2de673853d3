"""The commands of the docs' fenced blocks, and which of them must be tested. Pure (reads the docs).

The convention (tests/integration/test_doc_commands.py runs it):

* A fenced block's info string is a language and flags: ```` ```sh doc-test ```` is run as it stands,
  line by line, against a live rollout; ```` ```sh illustrative ```` is not run (another cluster, a
  change that would break the test's rollout, output mixed with commands). Find them with
  `grep -rn '^ *```.*\\(doc-test\\|illustrative\\)' README.md docs/`.
* A command that acts on a rollout must be in one of the two: every `kubectl ...`, every
  `temporal workflow ...`, and every `noderoll ...` (also `scripts/noderoll`, `.venv/bin/noderoll`)
  whose sub-command is a rollout verb, i.e. one of the commands `cli.ops_commands`,
  `cli.node_commands` and `cli.migrate_command` register (status, pause, resume, halt, retry, nodes,
  logs, node, rerun, version, migrate). `noderoll demo`, `dev`, `validate`, `import` and the like set things up or read files.
* In a block, a line is a command unless it is indented (output), starts with `#` (a comment), or
  is empty; a `$ ` prompt is dropped and lines ending in `\\` are joined with the next.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

TESTED = "doc-test"
ILLUSTRATIVE = "illustrative"
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)(?P<info>.*)$")
SEPARATORS = {"&&", "||", "|", ";", "&"}


@dataclass(frozen=True)
class Block:
    """One fenced block of a document."""

    doc: str
    line: int  # 1-based line of the opening fence
    language: str
    flags: frozenset[str]
    lines: tuple[str, ...]  # the content, without the fence's indentation


@dataclass(frozen=True)
class Command:
    """One command line of a block (continuation lines joined)."""

    doc: str
    line: int  # 1-based line in the document
    text: str
    block: Block

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def blocks(path: Path, root: Path) -> list[Block]:
    """The fenced blocks of the Markdown file `path`, in order."""
    found: list[Block] = []
    lines = path.read_text().splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        words = opening["info"].split()
        content: list[str] = []
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            raw = lines[end]
            content.append(raw[len(indent):] if raw.startswith(indent) else raw.lstrip())
            end += 1
        found.append(Block(str(path.relative_to(root)), index + 1, words[0] if words else "",
                           frozenset(words[1:]), tuple(content)))
        index = end + 1
    return found


def commands(block: Block) -> list[Command]:
    """The command lines of `block`: see the module docstring for what is not one."""
    out: list[Command] = []
    pending, start = "", 0
    for offset, raw in enumerate(block.lines):
        number = block.line + 1 + offset
        if pending:
            pending += " " + raw.strip()
        elif not raw.strip() or raw[:1].isspace() or raw.lstrip().startswith("#"):
            continue
        else:
            pending, start = raw.strip().removeprefix("$ "), number
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        out.append(Command(block.doc, start, pending, block))
        pending = ""
    return out


def words(text: str) -> list[str]:
    """Shell words of `text` with operators (`&&`, `|`, ...) as words of their own; comments dropped."""
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        return list(lexer)
    except ValueError:  # not shell (YAML, a query): plain words are enough to tell
        return text.split()


def segments(text: str) -> list[list[str]]:
    """The simple commands of a command line (split at `&&`, `||`, `|`, `;`), without leading VAR=value."""
    out: list[list[str]] = [[]]
    for word in words(text):
        if word in SEPARATORS:
            out.append([])
        else:
            out[-1].append(word)
    simple = []
    for seg in out:
        while seg and re.fullmatch(r"[A-Za-z_]\w*=.*", seg[0]):
            seg = seg[1:]
        if seg:
            simple.append(seg)
    return simple


def acts_on_rollout(text: str, rollout_verbs: Iterable[str]) -> bool:
    """Whether a command line runs kubectl, `temporal workflow`, or a noderoll rollout verb."""
    verbs = set(rollout_verbs)
    for seg in segments(text):
        program = Path(seg[0]).name
        rest = [w for w in seg[1:] if not w.startswith("-")]
        if program == "kubectl" or (program == "temporal" and rest[:1] == ["workflow"]):
            return True
        if program == "noderoll" and rest[:1] and rest[0] in verbs:
            return True
    return False


def unmarked(docs: Iterable[Path], root: Path, rollout_verbs: Iterable[str]) -> list[str]:
    """`doc:line: command` of every rollout command in a block marked neither tested nor illustrative."""
    verbs = set(rollout_verbs)
    problems = []
    for path in docs:
        for block in blocks(path, root):
            marks = block.flags & {TESTED, ILLUSTRATIVE}
            if len(marks) == 2:
                problems.append(f"{block.doc}:{block.line}: block marked both {TESTED} and {ILLUSTRATIVE}")
            if marks:
                continue
            problems += [f"{c.where}: {c.text}" for c in commands(block) if acts_on_rollout(c.text, verbs)]
    return problems


def doc_test_commands(docs: Iterable[Path], root: Path) -> list[Command]:
    """Every command of every `doc-test` block, in document order."""
    return [c for path in docs for block in blocks(path, root) if TESTED in block.flags for c in commands(block)]
