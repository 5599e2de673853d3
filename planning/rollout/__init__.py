"""The rules a fleet's wave runs by, applied by the fleet machine (`planning.fleet`). Pure.

What a wave holds and how it changes (`fleet_state`), which node needs what (`fleet_targets`), batches and
their evaluation (`batches`, `batch_state`, `rolling`, `compartments`), budgets (`disruption`: floors and
topology limits; `drain_ahead`; `respect`: other maintenance), holds (`gates`, `maintenance`), reruns
(`fleet_rerun`) and the canary's rollback (`fleet_rollback`).
"""
