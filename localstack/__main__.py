"""`python -m localstack dev up|status|down`: the local-stack commands without the rest of the CLI.

Same code as `noderoll dev ...`; useful when another command module of the CLI is broken
mid-change, and for tests that must not depend on unrelated commands. Does I/O.
"""

from __future__ import annotations

import argparse
import sys

from localstack.commands import register


def main() -> int:
    """Parse `dev up|status|down` and run it."""
    parser = argparse.ArgumentParser(prog="python -m localstack")
    register(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    args = parser.parse_args()
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
