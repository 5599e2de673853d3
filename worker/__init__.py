"""The worker process (workflows + activities), metrics, and the `noderoll` CLI entry points."""
