"""The `noderoll` command: the dispatcher (`main.py`) and the operator commands over Temporal and
Kubernetes (`status`, `pause`, `nodes`, `logs`, `node reset`, `rerun`, `version`...). Every other
sub-command lives with its feature (`worker.run_worker`, `crd_bridge.command`, `demo.command`...);
`cli.main` loads them by module name."""
