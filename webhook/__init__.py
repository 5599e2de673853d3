"""The validating admission webhook: `noderoll webhook` (docs/architecture.md, "The admission webhook")."""
