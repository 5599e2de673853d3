"""The wire protocol between noderoll's processes and workflows. Pure data and names (no I/O).

A leaf: it imports nothing of noderoll, so the agent, the workflows, the activities, the bridge
and the CLI can all share one definition of every workflow type, id, signal, query, search
attribute and message (see docs/architecture.md, "Packages").
"""
