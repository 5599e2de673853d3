"""The refusal to start beside the retired per-Package engine (service/legacy_engine.py): its text. Pure."""

from __future__ import annotations

from cli.migrate_command import HOLDING_PHASES, WINDOW_PHASES, node_query
from service.legacy_engine import LegacyRun, legacy_query, refusal


def test_the_refusal_names_at_most_ten_runs_counts_the_rest_and_says_what_to_run() -> None:
    runs = [LegacyRun(f"package/p{i:02d}", "RolloutWorkflow", "q") for i in range(12)]
    text = refusal("bridge", "prod", runs)
    assert text.startswith("noderoll bridge: refusing to start: 12 workflow(s) of the retired per-Package engine")
    assert "package/p09" in text and "package/p10" not in text and "and 2 more" in text
    assert "'prod'" in text and "`noderoll migrate --finish-legacy`" in text


def test_the_queries_name_the_old_types_and_the_window_phases() -> None:
    assert legacy_query() == ("ExecutionStatus = 'Running' AND "
                              "(WorkflowType = 'RolloutWorkflow' OR WorkflowType = 'BudgetWorkflow')")
    windows = node_query(WINDOW_PHASES)
    assert windows.startswith("WorkflowType = 'NodeWorkflow' AND ExecutionStatus = 'Running' AND (")
    assert all(f"NoderollPhase = '{p}'" in windows for p in ("Running", "Draining", "Interrupting"))
    assert "Erroring" in node_query(HOLDING_PHASES) and "Erroring" not in windows
