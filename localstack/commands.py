"""`noderoll dev up|status|down`: the command-line face of the local stack. Does I/O.

`up --json` prints exactly one JSON object with the contract keys `temporal_address`,
`temporal_ui`, `kubeconfig` and `state_dir`; progress goes to stderr so stdout stays parseable.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from localstack.provision import ProvisionError
from localstack.state import STATE_DIR_ENV, default_state_dir


def _state_dir(args: argparse.Namespace) -> Path:
    return Path(args.state_dir).resolve() if args.state_dir else default_state_dir()


def _progress(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


def cmd_up(args: argparse.Namespace) -> int:
    """Start (or reuse) the stack and print where it is."""
    from localstack.stack import StackError, up

    state_dir = _state_dir(args)
    began = time.monotonic()
    try:
        info = up(state_dir, progress=_progress if not args.quiet else lambda _: None)
    except (ProvisionError, StackError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(info.contract()))
        return 0
    print(f"local stack ready in {time.monotonic() - began:.1f}s (state dir {info.state_dir})")
    print(f"  Temporal address : {info.temporal_address}")
    print(f"  Temporal UI      : {info.temporal_ui}")
    print(f"  kubeconfig       : {info.kubeconfig}")
    print(f"  try: kubectl --kubeconfig {info.kubeconfig} get namespaces")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Report every component; exit 0 only when all run and are healthy."""
    from localstack.stack import status

    rows = status(_state_dir(args))
    if args.json:
        print(json.dumps([row.__dict__ for row in rows]))
    else:
        for row in rows:
            state = "running" if row.running else "stopped"
            health = "healthy" if row.healthy else "unhealthy" if row.running else "-"
            ports = ",".join(f"{k}={v}" for k, v in row.ports.items()) or "-"
            print(f"{row.name:<24} {state:<8} {health:<9} pid={row.pid or '-':<8} {ports}  {row.log or ''}")
    return 0 if all(row.healthy for row in rows) else 1


def cmd_down(args: argparse.Namespace) -> int:
    """Stop every component of the stack; `--purge` deletes its data too."""
    from localstack.stack import down

    state_dir = _state_dir(args)
    stopped = down(state_dir, purge=args.purge, progress=_progress)
    print(f"stopped {stopped} process(es) of {state_dir}" + (" and removed its data" if args.purge else ""))
    return 0


def register(subparsers: Any) -> None:
    """Add `dev up|status|down` to the `noderoll` parser."""
    dev = subparsers.add_parser("dev", help="the embedded local stack (Temporal + Kubernetes control plane)")
    dev_sub = dev.add_subparsers(dest="dev_command", metavar="{up,status,down}", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--state-dir",
        help=f"where logs, data and stack.json live (default: ${STATE_DIR_ENV} or .noderoll/)",
    )
    up = dev_sub.add_parser("up", parents=[common], help="start (or reuse) the stack and wait until ready")
    up.add_argument("--json", action="store_true", help="print one JSON object (contract keys) on stdout")
    up.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    up.set_defaults(func=cmd_up)
    st = dev_sub.add_parser("status", parents=[common], help="report each component")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=cmd_status)
    dn = dev_sub.add_parser("down", parents=[common], help="stop everything the stack started")
    dn.add_argument("--purge", action="store_true", help="also delete data, logs and certificates")
    dn.set_defaults(func=cmd_down)
