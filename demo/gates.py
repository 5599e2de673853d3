"""`noderoll demo --gates`: an analysis gate holds the demo's fleet after its canary, then releases it. Does I/O.

With `--gates` the demo also runs a Prometheus server (Debian's `prometheus`, installed when missing,
`localstack.prometheus`) scraping a small exporter in the demo process: the gauge
`noderoll_demo_gpu_xid_errors`, which starts at 3 ("the canary's GPUs log Xid errors"). The demo
policy gets the gate `gpu-xid-errors` (`max(noderoll_demo_gpu_xid_errors)`, success condition
`result < 1`, `betweenBatches`, every 5 s) with that server's address. After the canary's soak the
gate fails and the fleet halts: the live view shows `Halted`, the demo prints the gate's query,
value and time as the fleet reports them. After `HOLD_SECONDS` the demo sets the gauge to 0 (the
errors are gone), waits until Prometheus has scraped it, and sends the `resume` signal to the fleet
as an operator would (the failed gate counts as passed once); the evaluations after the following
batches pass on the recovered value and the rollout completes.

The hooks in `demo/command.py` are `add_arguments`, `prepare` (before the objects are
applied), `holding` (a halt by the demo's gate is not a failure of the demo) and `stop`. The
Prometheus server and the exporter end with the demo, also with `--keep` (a later wave of the
kept fleet then fails its gate: Prometheus unreachable).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, start_http_server
from rich.console import Console

from demo.resources import DemoObjects
from localstack.prometheus import PrometheusServer, free_port, prometheus_binary
from localstack.state import load_stack_info
from planning.rollout.gates import failure_text
from planning.views.status import RolloutProgress
from protocol import names

METRIC = "noderoll_demo_gpu_xid_errors"
GATE = {"name": "gpu-xid-errors", "query": f"max({METRIC})", "successCondition": "result < 1",
        "when": "betweenBatches", "intervalSeconds": 5}
# How long the demo leaves the fleet halted before the errors go away and it resumes the fleet.
HOLD_SECONDS = 10.0
POLL_SECONDS = 1.0
# A progress answered just after `resume` may still show the halt.
RELEASE_GRACE_SECONDS = 30.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`--gates` of `noderoll demo`."""
    parser.add_argument("--gates", action="store_true",
                        help="add an analysis gate on a demo Prometheus: it holds the fleet after the canary, "
                             "then the demo clears the metric and resumes the fleet")


def with_gate(objects: DemoObjects, address: str) -> DemoObjects:
    """The demo objects with the gate (querying `address`) added to the policy. Pure."""
    policy = copy.deepcopy(objects.policy)
    policy["spec"]["analysis"] = [{**GATE, "address": address}]
    return DemoObjects(policy, objects.packages)


@dataclass
class GateDemo:
    """The exporter, the Prometheus server and the thread that releases the hold."""

    console: Console
    state_dir: Path
    policy: str
    gauge: Gauge
    prometheus: PrometheusServer
    exporter: Any
    stopped: threading.Event = field(default_factory=threading.Event)
    # time.monotonic() when the demo saw the gate's halt, and when it sent `resume` (None: not yet).
    held_at: float | None = None
    released_at: float | None = None

    def say(self, message: str) -> None:
        self.console.print(f"[bold blue]demo[/]: {message}", highlight=False)

    def release_when_held(self) -> None:
        """Thread body: wait for the gate's halt, hold, clear the metric, resume the fleet."""
        try:
            asyncio.run(self._release())
        except Exception as err:  # noqa: BLE001 - the demo's own watch reports a fleet that stays halted
            self.say(f"[red]could not release the gate's hold: {err}[/]")

    async def _release(self) -> None:
        from planning.fleet.codec import progress_from_json
        from service.temporal_client import connect

        client = None
        while not self.stopped.is_set():
            stack = load_stack_info(self.state_dir)
            if stack is not None and stack.is_running():
                client = client or await connect(stack.temporal_address)
                try:
                    report = progress_from_json(await client.get_workflow_handle(
                        names.fleet_workflow_id(self.policy)).query(names.QUERY_PROGRESS))
                except Exception:  # noqa: BLE001 - the fleet does not run yet
                    report = None
                if report is not None and report.gate_failure is not None:
                    await self._hold_and_release(client, failure_text(report.gate_failure))
                    return
            await asyncio.sleep(POLL_SECONDS)

    async def _hold_and_release(self, client: Any, failure: str) -> None:
        fleet = names.fleet_workflow_id(self.policy)
        self.held_at = time.monotonic()
        self.say(f"[yellow]{fleet} halted[/]: {failure}")
        self.say(f"holding {HOLD_SECONDS:.0f}s (kubectl get deploymentpolicy {self.policy} -o yaml shows "
                 "status.gateFailure; a GateFailed Event is on it)")
        await asyncio.sleep(HOLD_SECONDS)
        self.gauge.set(0)
        while not self.stopped.is_set() and await asyncio.to_thread(self._value) != ["0"]:
            await asyncio.sleep(POLL_SECONDS)
        self.say(f"the GPU errors are gone ({METRIC} = 0 in Prometheus); resume {fleet} "
                 "(the failed gate counts as passed once; the next evaluations pass on their own)")
        await client.get_workflow_handle(fleet).signal(names.SIGNAL_RESUME)
        self.released_at = time.monotonic()

    def _value(self) -> list[str]:
        url = f"{self.prometheus.address}/api/v1/query?{urllib.parse.urlencode({'query': GATE['query']})}"
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return [item["value"][1] for item in json.load(answer)["data"]["result"]]
        except (OSError, ValueError, KeyError):
            return []


def prepare(args: argparse.Namespace, objects: DemoObjects, console: Console, state_dir: Path) -> DemoObjects:
    """With `--gates`: start the exporter, Prometheus and the releasing thread; return the objects with the gate.

    Without it, `objects` unchanged. The running parts are kept on `args.gate_demo` for `holding` and `stop`.
    """
    args.gate_demo = None
    if not getattr(args, "gates", False):
        return objects
    registry = CollectorRegistry()
    gauge = Gauge(METRIC, "GPU Xid errors the demo pretends the canary logs", registry=registry)
    gauge.set(3)
    port = free_port()
    exporter, _thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    server = PrometheusServer([f"127.0.0.1:{port}"], prometheus_binary(), log=state_dir / "prometheus.log")
    try:
        server.start()
    except RuntimeError:
        exporter.shutdown()
        raise
    demo = GateDemo(console, state_dir, objects.policy["metadata"]["name"], gauge, server, exporter)
    args.gate_demo = demo
    console.print(f"[bold blue]demo[/]: --gates: Prometheus {server.address} scrapes {METRIC} = 3 (the canary's "
                  f"GPUs log errors); the policy's gate {GATE['name']}: {GATE['query']} {GATE['successCondition']}",
                  highlight=False)
    threading.Thread(target=demo.release_when_held, name="demo-gates", daemon=True).start()
    return with_gate(objects, server.address)


def holding(args: argparse.Namespace, progress: RolloutProgress) -> bool:
    """True when `progress` is halted by the demo's own gate, until a little after the demo resumed the fleet."""
    demo: GateDemo | None = getattr(args, "gate_demo", None)
    # From the fleet's progress (gate_failure) or from the Package status (its message names the gate).
    if demo is None or (progress.gate_failure is None and f"gate {GATE['name']} failed" not in progress.message):
        return False
    return demo.released_at is None or time.monotonic() - demo.released_at < RELEASE_GRACE_SECONDS


def stop(args: argparse.Namespace) -> None:
    """Stop the releasing thread, Prometheus and the exporter (with `--gates`)."""
    demo: GateDemo | None = getattr(args, "gate_demo", None)
    if demo is None:
        return
    demo.stopped.set()
    demo.prometheus.stop()
    demo.exporter.shutdown()
    if demo.held_at is not None and demo.released_at is not None:
        demo.say(f"gate {GATE['name']} held {names.fleet_workflow_id(demo.policy)} for "
                 f"{demo.released_at - demo.held_at:.0f}s; released by resume")
    elif demo.held_at is None:
        demo.say(f"[yellow]gate {GATE['name']} never held the fleet[/] (did the canary finish?)")
