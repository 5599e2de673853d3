"""`noderoll plan [-f FILE]... [--fleet POLICY] [-o table|json]`: what the next wave of each fleet would do. Does I/O.

Reads the Packages and DeploymentPolicies the cluster holds, with the objects of `-f` files (not yet
applied) merged over them by kind and name, and every Node; asks each running fleet for the desired
state it holds (`desired_state`) and what it measured (`progress`: its window durations for the
ETA). The fleets' desired states are assembled as the bridge assembles them
(`crd_bridge.fleets.desired_fleet`), and each is planned by `planning.rollout_plan.plan_fleet`, the
fleet's own rules. Changes nothing.

Exit codes (as `terraform plan -detailed-exitcode`): 0 nothing would change, 2 some fleet would run
a window, 1 error (unreadable or invalid file or object, no cluster).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter, ValidationError
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text
from temporalio.client import WorkflowQueryRejectedError
from temporalio.common import QueryRejectCondition
from temporalio.service import RPCError

from api import keys
from api.package import Package
from api.policy import DeploymentPolicy
from cli.ops_client import QUERY_TIMEOUT, NoAnswer, Ops, OpsError, add_connection_flags
from cli.ops_commands import run_ops
from crd_bridge.fleets import FleetFacts, PackageFacts, desired_fleet, raw_fleet
from kube.node_snapshot import node_facts, node_view
from planning.eta import Timings, duration_text
from planning.rollout_plan import FleetPlan, PlanInput, plan_fleet
from protocol.fleet import FleetSpec
from protocol.names import DEFAULT_FLEET, QUERY_FLEET_SPEC

EXIT_NO_CHANGES, EXIT_ERROR, EXIT_CHANGES = 0, 1, 2
_SPEC = TypeAdapter(FleetSpec)


class PlanError(OpsError):
    """A file or object cannot be planned (the message says which and why)."""


def read_manifests(paths: list[str]) -> dict[tuple[str, str], dict[str, Any]]:
    """(kind, name) -> object of every Package and DeploymentPolicy in the files (later files win)."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for path in paths:
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text()
            documents = list(yaml.safe_load_all(text))
        except (OSError, yaml.YAMLError) as err:
            raise PlanError(f"{path}: {err}") from err
        for doc in documents:
            if not isinstance(doc, dict) or doc.get("kind") not in (keys.PACKAGE_KIND, keys.POLICY_KIND):
                continue
            name = (doc.get("metadata") or {}).get("name")
            if not name:
                raise PlanError(f"{path}: a {doc.get('kind')} without metadata.name")
            found[(doc["kind"], name)] = doc
    return found


def _validated(kind: str, obj: dict[str, Any]) -> Package | DeploymentPolicy:
    model = Package if kind == keys.PACKAGE_KIND else DeploymentPolicy
    try:
        return model.model_validate(obj)
    except ValidationError as err:
        name = (obj.get("metadata") or {}).get("name")
        raise PlanError(f"{kind} {name} is invalid ({err.error_count()} problem(s)); "
                        f"`noderoll validate` says which: {err.errors()[0]['msg']}") from err


def desired_fleets(objects: dict[tuple[str, str], dict[str, Any]], only: str | None) -> dict[str, FleetSpec]:
    """Fleet -> its desired state, as the bridge would hand it over (Packages being deleted are left out).

    Only the objects of the fleets planned are validated: an invalid object of another fleet does not
    stop the plan of this one."""
    packages: list[PackageFacts] = []
    for (kind, name), obj in sorted(objects.items()):
        fleet = raw_fleet(obj)
        if kind != keys.PACKAGE_KIND or only not in (None, fleet) or (obj.get("metadata") or {}).get("deletionTimestamp"):
            continue
        model = _validated(kind, obj)
        assert isinstance(model, Package)
        packages.append(PackageFacts(name, fleet, model))
    out = {}
    for fleet in sorted({p.fleet for p in packages}):
        policy = None
        if fleet != DEFAULT_FLEET:
            obj = objects.get((keys.POLICY_KIND, fleet))
            if obj is None:
                raise PlanError(f"Packages name DeploymentPolicy {fleet}, which is neither in the cluster nor in the files")
            validated = _validated(keys.POLICY_KIND, obj)
            assert isinstance(validated, DeploymentPolicy)
            policy = validated
        out[fleet] = desired_fleet(fleet, FleetFacts(packages, policy), None)
    return out


@dataclasses.dataclass
class RunningFleet:
    """What a running fleet holds and measured (None/empty when none runs)."""

    spec: FleetSpec | None = None
    timings: Timings = dataclasses.field(default_factory=Timings)
    wave: int = 0


async def running_fleet(ops: Ops, fleet: str) -> RunningFleet:
    """The running fleet's desired state, wave and window timings (empty when none runs)."""
    try:
        progress = await ops.query_fleet(fleet)
        answer = await ops.fleet(fleet).query(QUERY_FLEET_SPEC, reject_condition=QueryRejectCondition.NOT_OPEN,
                                              rpc_timeout=QUERY_TIMEOUT)
    except (NoAnswer, WorkflowQueryRejectedError, RPCError):
        return RunningFleet()
    spec = _SPEC.validate_python(answer) if answer else None
    return RunningFleet(spec, progress.timings, progress.wave)


async def build_plans(ops: Ops, files: list[str], only: str | None) -> list[FleetPlan]:
    """Every fleet's plan (module docstring)."""
    objects = {(keys.PACKAGE_KIND, o["metadata"]["name"]): o for o in await asyncio.to_thread(ops.list_packages)}
    policies = await asyncio.to_thread(ops.custom.list_cluster_custom_object, keys.GROUP, keys.VERSION,
                                       keys.POLICY_PLURAL)
    objects |= {(keys.POLICY_KIND, o["metadata"]["name"]): o for o in policies.get("items") or []}
    objects |= read_manifests(files)
    nodes = [node_view(node_facts(n)) for n in (await asyncio.to_thread(ops.core.list_node)).items]
    now = datetime.now(UTC).isoformat()
    plans = []
    for fleet, desired in desired_fleets(objects, only).items():
        running = await running_fleet(ops, fleet)
        plans.append(plan_fleet(PlanInput(desired, nodes, now, running.spec, running.timings, running.wave)))
    return plans


def _windows_table(plan: FleetPlan) -> Table:
    table = Table(title=f"fleet/{plan.fleet}: windows in batch order", title_justify="left")
    for column in ("batch", "compartment", "node", "packages (stages in order)", "drain", "interrupt"):
        table.add_column(column)
    for batch in plan.batches:
        for compartment, nodes in batch.compartments.items():
            for node in nodes:
                window = plan.windows.get(node)
                if window is None:
                    continue
                steps = "; ".join(f"{p.name} {p.action} {p.version}: {' > '.join(p.stages)}" for p in window.packages)
                steps += "".join(f"; {p}: not run ({why})" for p, why in sorted(window.not_run.items()))
                interrupt = window.interrupt + (f" ({', '.join(window.services)})" if window.services else "")
                label = f"{batch.number}{' canary' if batch.canary else ''}"
                table.add_row(label, compartment, node, steps, "yes" if window.drain else "no", interrupt or "none")
    return table


def render_plan(plan: FleetPlan) -> Group:
    """One fleet's plan as text and tables."""
    t = plan.totals
    changed = ", ".join(plan.changed) or ("policy only" if plan.policy_changed else "none")
    lines = [Text(f"fleet/{plan.fleet} wave {plan.wave}: changes {changed}", style="bold"),
             Text(f"  {t.windows} window(s) on {t.nodes} node(s): {t.drains} drain(s), {t.reboots} reboot(s), "
                  f"{t.interrupts} interrupt(s), {t.batches} batch(es); {len(plan.done)} node(s) already done, "
                  f"{len(plan.not_targeted)} not targeted")]
    if plan.canary:
        lines.append(Text(f"  canary: {', '.join(plan.canary)} (soak {plan.canary_soak_seconds}s)"))
    for batch in plan.batches:
        parts = "; ".join(f"{c} {len(n)}: {', '.join(n)}" for c, n in batch.compartments.items())
        lines.append(Text(f"  batch {batch.number}{' (canary)' if batch.canary else ''}: {parts}"))
    if plan.eta is not None and plan.eta.finish_at:
        lines.append(Text(f"  ETA {plan.eta.finish_at} (in {duration_text(plan.eta.seconds_left)}); "
                          f"{plan.eta.source}"))
    lines.append(Text(f"  assumes {plan.assumes}"))
    lines.extend(Text(f"  note: {note}") for note in plan.notes)
    parts: list[Any] = [*lines]
    if plan.windows:
        parts.append(_windows_table(plan))
    if plan.skipped:
        skipped = Table(title=f"fleet/{plan.fleet}: nodes skipped or blocked", title_justify="left")
        skipped.add_column("node")
        skipped.add_column("package: why")
        for node, reasons in plan.skipped.items():
            skipped.add_row(node, "; ".join(f"{p}: {why}" for p, why in reasons.items()))
        parts.append(skipped)
    return Group(*parts)


def plan_json(plans: list[FleetPlan]) -> dict[str, Any]:
    """Every fleet's plan as JSON (`changes` per fleet, and overall)."""
    return {"changes": any(p.changes for p in plans),
            "fleets": [{**dataclasses.asdict(p), "changes": p.changes} for p in plans]}


def cmd_plan(args: argparse.Namespace) -> int:
    """`noderoll plan` (module docstring)."""

    async def body(ops: Ops) -> int:
        plans = await build_plans(ops, args.file, args.fleet)
        if args.output == "json":
            print(json.dumps(plan_json(plans), indent=2, sort_keys=True))
        else:
            console = Console(width=None if sys.stdout.isatty() else 200)
            changing = [p for p in plans if p.changes]
            for plan in changing:
                console.print(render_plan(plan))
            if not changing:
                console.print("no changes: every targeted node is at its fleet's desired state"
                              + (f" ({sum(len(p.skipped) for p in plans)} node(s) skipped or blocked)"
                                 if any(p.skipped for p in plans) else ""))
        return EXIT_CHANGES if any(p.changes for p in plans) else EXIT_NO_CHANGES

    return run_ops(args, body)


def register(subparsers: Any) -> None:
    """Add `noderoll plan`."""
    parser = subparsers.add_parser(
        "plan", help="what each fleet's next wave would do: batches, canary, per node its merged window, "
                     "skipped nodes, ETA (exit 0 no change, 2 changes, 1 error)")
    add_connection_flags(parser)
    parser.add_argument("-f", "--file", action="append", default=[],
                        help="Packages/DeploymentPolicies not yet applied, merged over the cluster's (repeatable; - stdin)")
    parser.add_argument("--fleet", metavar="POLICY", help="only this fleet (a DeploymentPolicy, or `default`)")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    parser.set_defaults(func=cmd_plan)
