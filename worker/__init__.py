"""`noderoll worker`: the Temporal worker process that runs every workflow and activity (`run_worker.py`,
the registry of both in `registry.py`). The CLI is `cli/`, the demo `demo/`."""
