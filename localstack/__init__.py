"""The embedded local stack: Temporal dev server, etcd, kube-apiserver, controller manager and scheduler."""
