"""The `progress` query as the tests ask it: every node listed (their fleets have a few nodes, one page)."""

from __future__ import annotations

from planning.views.fleet_status import NODES_PAGE_MAX
from protocol.fleet import ProgressFilter

# The argument of the fleet query `progress` that lists every node (`protocol.fleet.ProgressFilter`).
EVERY_NODE = ProgressFilter(all=True, limit=NODES_PAGE_MAX)
