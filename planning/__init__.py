"""Pure decision logic: node plans, dependency order, interrupt merge, batch planning (no I/O, no Temporal)."""
