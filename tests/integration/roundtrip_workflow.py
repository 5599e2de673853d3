"""A minimal workflow + activity pair for the dev-server round trip (kept free of Kubernetes imports
so the workflow sandbox re-imports nothing heavy)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from temporalio import activity, workflow


@dataclass(frozen=True)
class GreetInput:
    """Who to greet."""

    name: str


@activity.defn(name="test_greet")
async def greet(request: GreetInput) -> str:
    """The activity side: runs in the worker, outside the sandbox."""
    return f"hello {request.name} from activity {activity.info().activity_type}"


@workflow.defn(name="TestRoundTrip")
class RoundTripWorkflow:
    """Calls the activity by name, as noderoll's workflows do."""

    @workflow.run
    async def run(self, request: GreetInput) -> str:
        return await workflow.execute_activity(
            "test_greet", request, result_type=str, start_to_close_timeout=timedelta(seconds=30)
        )
