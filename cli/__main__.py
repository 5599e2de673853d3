"""`python -m cli ...`: the `noderoll` console script without the installed entry point."""

from cli.main import run

run()
