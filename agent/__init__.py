"""The package agent: runs a package's config.json steps for one stage against a host root (runs in the package pod)."""
