"""Durable orchestration: rollout, node and budget workflows (deterministic, no I/O)."""
