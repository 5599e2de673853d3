"""noderoll's API: contract names, enums and the pydantic models of Package and DeploymentPolicy (pure, no I/O)."""
