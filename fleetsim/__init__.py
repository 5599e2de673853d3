"""fleetsim: simulated kubelets for a fleet of nodes against a real kube-apiserver (test bed, demo, benchmarks)."""
