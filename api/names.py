"""Name rules for noderoll objects. Pure (no I/O).

Package and DeploymentPolicy names must be lowercase DNS labels of at most 43 characters: they
become parts of pod names, label values and Temporal workflow ids, which have their own limits
(pod names derived from them stay under 63 characters). A CRD cannot put a schema rule on
`metadata.name`, so the models enforce this (the bridge reports it as an invalid object and
`noderoll validate` refuses it).
"""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 43
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
NAME_HINT = (
    f"a lowercase DNS label of at most {MAX_NAME_LENGTH} characters "
    "(a-z, 0-9 and '-', starting and ending with a letter or digit)"
)


def check_name(name: str, what: str = "name") -> str:
    """Return `name` if it is a valid object name, else raise ValueError saying what is valid."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"{what} is empty; use {NAME_HINT}")
    if len(name) > MAX_NAME_LENGTH:
        raise ValueError(f"{what} {name!r} has {len(name)} characters; use {NAME_HINT}")
    if not _DNS_LABEL_RE.match(name):
        raise ValueError(f"{what} {name!r} is invalid; use {NAME_HINT}")
    return name


def is_valid_name(name: str) -> bool:
    """True when `name` is a valid Package or DeploymentPolicy name."""
    try:
        check_name(name)
    except ValueError:
        return False
    return True
