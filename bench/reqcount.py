"""Client-side count of Kubernetes API requests of one noderoll process, by verb and resource. I/O.

    python -m bench.reqcount COUNTS.json worker --task-queue q ...   # runs `noderoll worker ...`

Wraps urllib3's `HTTPConnectionPool.urlopen` (every `kubernetes` client call goes through it) before
the noderoll command starts, and writes the counts as JSON to COUNTS.json every second and at exit.
This separates noderoll's own requests from the simulated kubelets' and the controllers', which
the apiserver's `apiserver_request_total` does not (it has no client label).
"""

from __future__ import annotations

import atexit
import json
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import urllib3

_counts: Counter[str] = Counter()
_lock = threading.Lock()


def classify(method: str, url: str) -> str | None:
    """`"verb resource[/subresource]"` in the apiserver's vocabulary, None for non-resource paths. Pure."""
    parts = urlsplit(url)
    segments = [s for s in parts.path.split("/") if s]
    if segments[:1] == ["api"]:
        rest = segments[2:]
    elif segments[:1] == ["apis"]:
        rest = segments[3:]
    else:
        return None
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
        rest = rest[2:]
    if not rest:
        return None
    resource = rest[0] + (f"/{rest[2]}" if len(rest) >= 3 else "")
    named = len(rest) >= 2
    query = parse_qs(parts.query)
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method.upper())
    if verb is None:
        watching = query.get("watch", ["false"])[0] in ("true", "1")
        verb = "watch" if watching else ("get" if named else "list")
    elif verb == "delete" and not named:
        verb = "deletecollection"
    return f"{verb} {resource}"


def _install() -> None:
    original = urllib3.connectionpool.HTTPConnectionPool.urlopen

    def counted(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        key = classify(method, url)
        if key is not None:
            with _lock:
                _counts[key] += 1
        return original(self, method, url, *args, **kwargs)

    urllib3.connectionpool.HTTPConnectionPool.urlopen = counted  # type: ignore[method-assign]


def _dump(path: Path) -> None:
    with _lock:
        data = dict(_counts)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    tmp.replace(path)


def _dump_every_second(path: Path) -> None:
    stop = threading.Event()
    while not stop.wait(1.0):
        _dump(path)


def main(argv: list[str]) -> int:
    """Install the counter, then run `noderoll <argv[1:]>`."""
    path = Path(argv[0])
    _install()
    atexit.register(_dump, path)
    threading.Thread(target=_dump_every_second, args=(path,), daemon=True, name="reqcount").start()
    from cli.main import main as noderoll_main

    return noderoll_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
