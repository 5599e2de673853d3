"""Package versions: parsing and ordering. Pure (no I/O).

A Package `version` is semver, with the shorthands NodeWright accepts (it prefixes `v` and uses
Go's `golang.org/x/mod/semver`): `1`, `1.2`, `1.2.3`, an optional leading `v`, and pre-release and
build suffixes on the full form (`2.3.1-test`, calendar versions such as `2024.7.7-test`).
A missing minor or patch counts as 0 for ordering, so `1.2` == `1.2.0`. Build metadata is ignored
for ordering (semver rule 10). Numeric parts must not have leading zeros (`2024.07.07` is invalid).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache, total_ordering

import semver

_NUM = r"0|[1-9]\d*"
_IDENT = r"[0-9A-Za-z-]+"
_VERSION_RE = re.compile(
    rf"^v?(?P<major>{_NUM})(?:\.(?P<minor>{_NUM})(?:\.(?P<patch>{_NUM})"
    rf"(?:-(?P<pre>{_IDENT}(?:\.{_IDENT})*))?(?:\+(?P<build>{_IDENT}(?:\.{_IDENT})*))?)?)?$"
)

VALID_VERSION_HINT = "a semantic version such as 1.2.3, 1.2, 2.3.1-test or 2024.7.7-test"


class VersionError(ValueError):
    """Raised when a string is not a valid package version."""


@total_ordering
@dataclass(frozen=True)
class Version:
    """A parsed package version; compares by semver precedence, keeps the original text."""

    text: str
    parsed: semver.Version

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self.parsed.compare(other.parsed) == 0

    def __lt__(self, other: Version) -> bool:
        return self.parsed.compare(other.parsed) < 0

    def __hash__(self) -> int:
        # Equal versions (1.2 and 1.2.0) must hash alike; build metadata does not take part.
        return hash(self.parsed.replace(build=None))

    def __str__(self) -> str:
        return self.text


# A fleet's listing compares each node's recorded versions with its Packages' (`noderoll plan` simulates
# dozens of listings of 10,000 nodes): the few distinct strings are parsed once. Version is immutable.
@lru_cache(maxsize=4096)
def parse_version(text: str) -> Version:
    """Parse `text` as a package version or raise VersionError saying what is valid."""
    match = _VERSION_RE.match(text.strip()) if isinstance(text, str) else None
    if match is None or text != text.strip():
        raise VersionError(f"{text!r} is not a valid version; use {VALID_VERSION_HINT}")
    parts = match.groupdict()
    parsed = semver.Version(
        int(parts["major"]),
        int(parts["minor"] or 0),
        int(parts["patch"] or 0),
        prerelease=parts["pre"],
        build=parts["build"],
    )
    return Version(text=text, parsed=parsed)


def is_valid_version(text: str) -> bool:
    """True when `text` parses as a package version."""
    try:
        parse_version(text)
    except VersionError:
        return False
    return True


@lru_cache(maxsize=4096)
def compare_versions(left: str, right: str) -> int:
    """-1, 0 or 1 as `left` is older than, equal to or newer than `right` (both must be valid)."""
    a, b = parse_version(left), parse_version(right)
    return a.parsed.compare(b.parsed)


def same_version(left: str, right: str) -> bool:
    """True when both versions are valid and equal; an unparseable version is never the same."""
    try:
        return compare_versions(left, right) == 0
    except VersionError:
        return False
