"""Read-only views of fleets: status, progress, plan, ETA, report. Pure.

The CRs' status (`status`), a fleet's `progress` (`fleet_status`), `noderoll plan` (`rollout_plan`) and the
ETA (`eta`, `fleet_eta`), both the fleet machine run ahead on a simulated fleet (`simulate`, `worlds`), and
`noderoll report` (`rollout_report`, `report_html`).
"""
