"""Host-side NodeWright package fields for `noderoll import`: interrupts, config, drain. Pure (no I/O).

Converters in the manner of `api/nodewright_fields.py` (a NodeWright value, its path, the notes;
`Unmappable` when the object cannot be imported safely):
* `interrupt`: `{type, services}`; NodeWright's agent type names (`node_restart`...) are read too;
  `services` are kept for type `service` only; a `service` interrupt without services (NodeWright
  then only reloaded systemd) is written as `noop`. An unknown type is Unmappable.
* `config` (`configMap`), kept as written; keys noderoll reserves (`noderoll.*`) are Unmappable.
* `config_interrupts`: keys and `*`/`?` globs kept; other Go `filepath.Match` globs (`[...]`,
  escapes) are written as the config keys they match now, interrupts merged per key as on a node.
* `drain` (`drainConfig`): timeout and grace period from Go durations; `deleteEmptyDirData`
  defaults to true (NodeWright always evicted pods with emptyDir data); `disableEviction`,
  `force: false` and `ignoreDaemonSets: false` cannot be carried.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from api.enums import InterruptType
from api.interrupts import InterruptRequest, merge_interrupts
from api.nodewright_fields import Notes, Unmappable, as_mapping, unknown_fields

# noderoll's configInterrupts keys: a config key or a glob with * and ?; its config keys (api/package.py).
_NODEROLL_GLOB_RE = re.compile(r"^[-._a-zA-Z0-9*?]{1,253}$")
_CONFIG_KEY_RE = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
_RESERVED_CONFIG_PREFIX = "noderoll."
# Go's time.ParseDuration units (metav1.Duration is written that way: "90s", "1h30m", "2.5m").
_GO_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_GO_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
# NodeWright's agent type names (what its operator passes to the agent), accepted in `type` too.
_AGENT_INTERRUPT_NAMES = {
    "node_restart": InterruptType.REBOOT,
    "service_restart": InterruptType.SERVICE,
    "restart_all_services": InterruptType.RESTART_ALL_SERVICES,
    "no_op": InterruptType.NOOP,
}
_INTERRUPT_TYPES = frozenset(t.value for t in InterruptType)


def interrupt(value: Any, at: str, notes: Notes) -> dict[str, Any] | None:
    """An interrupt `{type, services}` (NodeWright's agent type names are read too)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise Unmappable(at, f"is {type(value).__name__}, not an interrupt (type, services)")
    unknown_fields(value, {"type", "services"}, at, notes, "not a field of a NodeWright interrupt")
    raw = value.get("type")
    kind = None
    if isinstance(raw, str):
        kind = InterruptType(raw) if raw in _INTERRUPT_TYPES else _AGENT_INTERRUPT_NAMES.get(raw)
    if kind is None:
        raise Unmappable(f"{at}.type", f"{raw!r} is not an interrupt type; NodeWright's are reboot, service, "
                         "restartAllServices and noop (guessing one could reboot nodes, or skip a reboot)")
    services = value.get("services") or []
    if not isinstance(services, list) or not all(isinstance(s, str) for s in services):
        raise Unmappable(f"{at}.services", "is not a list of systemd unit names")
    if kind is not InterruptType.SERVICE and services:
        notes.not_carried(f"{at}.services", f"only used by type service; NodeWright ignores them for {kind.value}")
        services = []
    if kind is InterruptType.SERVICE and not services:
        notes.not_carried(at, "type service without services: NodeWright only ran `systemctl daemon-reload`; "
                          "noderoll needs a unit to restart, so the interrupt is written as noop (post-interrupt "
                          "stages run; no cordon, no drain, no host action)")
        kind = InterruptType.NOOP
    out: dict[str, Any] = {"type": kind.value}
    if services:
        out["services"] = list(dict.fromkeys(services))
    return out


def go_glob_regex(pattern: str) -> re.Pattern[str] | None:
    """Go's `filepath.Match` pattern as a regex (`*`, `?`, `[...]` with `^` and ranges, `\\`
    escapes), or None when the pattern is malformed (Go's ErrBadPattern)."""
    out, i = "", 0
    while i < len(pattern):
        char = pattern[i]
        if char == "*":
            out += "[^/]*"
        elif char == "?":
            out += "[^/]"
        elif char == "\\":
            if i + 1 >= len(pattern):
                return None
            i += 1
            out += re.escape(pattern[i])
        elif char == "[":
            negate = pattern[i + 1:i + 2] == "^"
            start = i + 2 if negate else i + 1
            # Go reads a `]` right after `[` (or `[^`) as a member of the class.
            end = pattern.find("]", start + 1)
            if end < 0 or start >= len(pattern):
                return None
            body = pattern[start:end]
            escaped = body.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")
            out += "[" + ("^" if negate else "") + escaped + "]"
            i = end
        else:
            out += re.escape(char)
        i += 1
    try:
        return re.compile(out + r"\Z")
    except re.error:
        return None


def config_interrupts(value: Any, config: Mapping[str, str], at: str, notes: Notes) -> dict[str, Any]:
    """`configInterrupts`: keys and globs noderoll can read are kept; other globs are written as
    the config keys they match (the same interrupts for the same keys)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise Unmappable(at, "is not a map of config key or glob -> interrupt")
    out: dict[str, dict[str, Any]] = {}
    for pattern, raw in value.items():
        where = f"{at}.{pattern}"
        converted = interrupt(raw, where, notes)
        if converted is None:
            notes.not_carried(where, "has no interrupt")
            continue
        regex = go_glob_regex(str(pattern))
        keys = sorted(k for k in config if regex is not None and regex.match(k))
        if not keys:
            notes.not_carried(where, "matches no configMap key (NodeWright refuses it too); left out")
            continue
        if _NODEROLL_GLOB_RE.match(str(pattern)):
            targets = [str(pattern)]
        else:
            targets = keys
            notes.note(where, f"glob written as the keys it matches now ({', '.join(keys)}); a key added later "
                       "needs its own entry")
        for key in targets:
            out[key] = _merged(out.get(key), converted)
    return out


def _merged(first: dict[str, Any] | None, second: dict[str, Any]) -> dict[str, Any]:
    requests = [InterruptRequest(InterruptType(d["type"]), tuple(d.get("services", []))) for d in (first, second) if d]
    merged = merge_interrupts(requests)
    assert merged is not None
    out: dict[str, Any] = {"type": merged.type.value}
    if merged.services:
        out["services"] = list(merged.services)
    return out


def config(value: Any, at: str) -> dict[str, str]:
    """`configMap` as `config`: file name -> content, as written."""
    data = as_mapping(value, at, "a map of file name -> content")
    out = {}
    for key, content in data.items():
        where = f"{at}.{key}"
        if not isinstance(key, str) or not _CONFIG_KEY_RE.match(key):
            raise Unmappable(where, "is not a ConfigMap key (letters, digits, '-', '_' and '.')")
        if key.startswith(_RESERVED_CONFIG_PREFIX):
            raise Unmappable(where, f"keys starting with {_RESERVED_CONFIG_PREFIX!r} hold the node's metadata in "
                             "noderoll's stage pods; rename the file (and the steps reading it)")
        if not isinstance(content, str):
            raise Unmappable(where, f"is {type(content).__name__}, not a string (quote it)")
        out[key] = content
    return out


def go_duration_seconds(value: Any) -> float | None:
    """Seconds of a Go duration string (`90s`, `1h30m`, `0`), or None when it is not one."""
    if isinstance(value, bool) or not isinstance(value, str):
        return None
    text = value.strip()
    sign = -1.0 if text.startswith("-") else 1.0
    text = text.lstrip("+-")
    if text == "0":
        return 0.0
    parts = _GO_DURATION_PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        return None
    return sign * sum(float(number) * _GO_UNIT_SECONDS[unit] for number, unit in parts)


def drain(value: Any, at: str, notes: Notes) -> dict[str, Any]:
    """`drainConfig` as `drain`. Without it NodeWright evicted pods with emptyDir data, so the
    imported drain does too (`deleteEmptyDirData: true`)."""
    out: dict[str, Any] = {"deleteEmptyDirData": True}
    if value is None:
        return out
    if not isinstance(value, Mapping):
        notes.not_carried(at, "is not a drainConfig; NodeWright's default drain is carried")
        return out
    known = {"timeout", "gracePeriod", "deleteEmptyDirData", "disableEviction", "force", "ignoreDaemonSets"}
    unknown_fields(value, known, at, notes, "not a NodeWright drainConfig field")
    timeout = value.get("timeout")
    seconds = go_duration_seconds(timeout) if timeout is not None else None
    if timeout is not None and (seconds is None or seconds < 0):
        notes.not_carried(f"{at}.timeout", f"{timeout!r} is not a duration; noderoll's default bound (600 s) holds")
    elif seconds == 0:
        notes.not_carried(f"{at}.timeout", "0 (wait forever) cannot be carried: noderoll bounds every drain and "
                          "reports the blocking pods; the default bound (600 s) holds, set drain.timeoutSeconds")
    elif seconds is not None:
        out["timeoutSeconds"] = max(1, math.ceil(seconds))
    grace = value.get("gracePeriod")
    grace_seconds = go_duration_seconds(grace) if grace is not None else None
    if grace is not None and (grace_seconds is None or grace_seconds < 0):
        notes.not_carried(f"{at}.gracePeriod", f"{grace!r} is not a duration; each pod's own grace period holds")
    elif grace_seconds is not None:
        out["gracePeriodSeconds"] = math.ceil(grace_seconds)
    if value.get("deleteEmptyDirData") is False:
        out["deleteEmptyDirData"] = False
    if value.get("disableEviction") is True:
        notes.not_carried(f"{at}.disableEviction", "noderoll always evicts through the Eviction API, so "
                          "PodDisruptionBudgets hold; it never deletes pods directly")
    if value.get("force") is False:
        notes.not_carried(f"{at}.force", "noderoll evicts pods without a controller too (as force: true)")
    if value.get("ignoreDaemonSets") is False:
        notes.not_carried(f"{at}.ignoreDaemonSets", "noderoll never evicts DaemonSet pods (their controller "
                          "would put them back at once)")
    return out
