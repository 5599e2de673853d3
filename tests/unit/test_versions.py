"""Package version parsing and ordering (api/versions.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.versions import VersionError, compare_versions, is_valid_version, parse_version


@pytest.mark.parametrize(
    "text",
    ["1", "1.2", "1.2.3", "v1.2.3", "2.3.1-test", "2024.7.7-test", "1.0.0-rc.1+build.5", "0.0.0"],
)
def test_valid_versions(text: str) -> None:
    assert is_valid_version(text)


@pytest.mark.parametrize("text", ["", "x", "1.2.3.4", "01.2", "1.02", "1.2-x", " 1.2", "1.2.3-", "latest"])
def test_invalid_versions_name_what_is_valid(text: str) -> None:
    with pytest.raises(VersionError, match="semantic version such as 1.2.3"):
        parse_version(text)


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        ("1.2", "1.2.0", 0),
        ("1", "1.0.0", 0),
        ("1.10.0", "1.9.0", 1),
        ("2024.7.7-test", "2024.7.7", -1),
        ("2024.7.7", "2024.7.6", 1),
        ("1.0.0-alpha", "1.0.0-beta", -1),
        ("1.0.0+a", "1.0.0+b", 0),
        ("v2", "1.9.9", 1),
    ],
)
def test_ordering(left: str, right: str, expected: int) -> None:
    assert compare_versions(left, right) == expected


def test_equal_versions_hash_alike() -> None:
    assert {parse_version("1.2"), parse_version("1.2.0"), parse_version("1.2.0+x")} == {
        parse_version("1.2.0")
    }


@settings(max_examples=200)
@given(
    st.tuples(st.integers(0, 3000), st.integers(0, 50), st.integers(0, 50)),
    st.tuples(st.integers(0, 3000), st.integers(0, 50), st.integers(0, 50)),
)
def test_ordering_matches_tuples(a: tuple[int, int, int], b: tuple[int, int, int]) -> None:
    left, right = ".".join(map(str, a)), ".".join(map(str, b))
    assert compare_versions(left, right) == (a > b) - (a < b)
