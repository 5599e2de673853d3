"""Durable orchestration: fleet rollouts and node windows (deterministic, no I/O)."""
