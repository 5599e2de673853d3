"""`python -m agent`: see agent/cli.py."""

import sys

from agent.cli import main

sys.exit(main())
