"""Benchmarks: `noderoll bench` (overhead against the ideal, API cost, scale)."""
