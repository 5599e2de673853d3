"""One node's window: what it runs, in which order, how it drains, what it shows. Pure.

Per-node plan and dependency order (`node_plan`, `dependencies`, `pod_steps`), the window's settings and
status (`window`), the drain (`drain`, `drain_rules`, `eviction_notice`), the GPU verify (`verify`), marks
and resets (`node_marks`, `node_reset`), the runtime-required taint (`runtime_taint`) and per-Package target
rules (`targets`).
"""
