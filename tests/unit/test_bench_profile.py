"""`bench.profile.summarize`: where a collapsed-stacks profile's samples went."""

from __future__ import annotations

from bench.profile import summarize

SAMPLE = """\
process 10:"python -m cli worker";<module> (/r/cli/main.py:3);run (/r/activities/fleet.py:60);send (/usr/lib/python3.11/ssl.py:1) 6
process 10:"python -m cli worker";<module> (/r/cli/main.py:3);read (/r/kube/nodes.py:20);call_api (/v/lib/python3.11/site-packages/kubernetes/client/api/core_v1_api.py:9) 3
process 10:"python -m cli worker";<module> (/r/cli/main.py:3);select (/r/planning/node/targets.py:7) 1
process 10:"python -m cli worker";poll (/v/lib/python3.11/site-packages/temporalio/worker/_workflow.py:1) 2
garbage line without a count
"""


def test_self_time_by_function_and_share_by_innermost_package() -> None:
    summary = summarize(SAMPLE)
    assert summary["samples"] == 12
    assert summary["top_self"] == [["send (ssl.py)", 0.5], ["call_api (core_v1_api.py)", 0.25],
                                   ["poll (_workflow.py)", 0.167], ["select (targets.py)", 0.083]]
    # Each sample counts for its innermost frame of ours (not the CLI's frame on every stack); a
    # dependency's `api/` directory is not noderoll's `api`; no frame of ours is `other`.
    assert summary["packages"] == {"activities": 0.5, "kube": 0.25, "other": 0.167, "planning": 0.083}


def test_an_empty_profile() -> None:
    assert summarize("") == {"samples": 0, "top_self": [], "packages": {}}
