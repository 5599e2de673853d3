"""The promotion of a policy's changes across clusters (`spec.clusters`, ADR 0017). Pure.

A cluster's fleet's side (`cluster_turns`), the decisions of `global/<policy>` (`global_rollout`) and the
JSON of its state and answers (`global_codec`).
"""
