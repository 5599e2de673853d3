"""Every side effect of noderoll: Kubernetes API calls as Temporal activities."""
