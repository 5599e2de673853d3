"""`noderoll plan [-f FILE]... [--fleet POLICY] [-o table|json]`: what the next wave of each fleet would do. Does I/O.

Reads the Packages and DeploymentPolicies the cluster holds, with the objects of `-f` files (not yet
applied) merged over them by kind and name, every Node and the NodeMaintenance objects of other
requestors (`spec.respect`; none where the CRD is absent); asks each running fleet for the desired
state it holds (`desired_state`) and what it measured (`progress`: its window durations for the
ETA). The fleets' desired states are assembled as the bridge assembles them
(`crd_bridge.fleets.desired_fleet`), and each is planned by `planning.views.rollout_plan.plan_fleet`, the
fleet's own rules. Changes nothing. With `--cluster NAME` the fleets asked are the cluster's
(`fleet/<cluster>/<policy>`), and the plan orders nodes by that id, as the cluster's fleet does.

The files are read as `kubectl apply` reads them (`api.manifests`): Lists are expanded
(`kubectl get -o yaml` writes `kind: List`), a document meant for noderoll that cannot be read as a
Package or DeploymentPolicy (an unknown or misspelled kind, a wrong apiVersion) is an error, and a
document of another API group (a ConfigMap in the same folder) is skipped with a note on stderr.

Exit codes (as `terraform plan -detailed-exitcode`): 0 nothing would change, 2 some fleet would run
a window, 1 error: an unreadable or invalid file or object; `--fleet` naming no fleet (no
DeploymentPolicy of that name in the cluster or the files, not `default`, and no such fleet running:
the message names the fleets there are); a running fleet that did not answer its queries (no worker
polling, a query that timed out or failed: the plan cannot tell what that fleet rolls out now, and
says which fleet and why; a fleet that never ran or whose run has closed is planned as a new one);
no cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import difflib
import json
import sys
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any

from kubernetes.client.exceptions import ApiException
from pydantic import TypeAdapter, ValidationError
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from api import keys
from api.manifests import manifest_objects
from api.package import Package
from api.policy import DeploymentPolicy
from api.validate_command import STDIN, read_file
from api.yaml_source import ParsedSource, SourceProblem, parse
from cli.ops_client import NoAnswer, Ops, OpsError, add_connection_flags
from cli.ops_commands import run_ops
from crd_bridge.fleets import FleetFacts, PackageFacts, desired_fleet, raw_fleet
from crd_bridge.protection import package_ref, usage
from kube import node_maintenance
from kube.node_snapshot import node_facts, node_view
from planning.views.eta import Timings, duration_text
from planning.views.rollout_plan import FleetPlan, PlanInput, plan_fleet
from protocol.fleet import FleetSpec
from protocol.names import DEFAULT_FLEET, QUERY_FLEET_SPEC, fleet_workflow_id

EXIT_NO_CHANGES, EXIT_ERROR, EXIT_CHANGES = 0, 1, 2
_SPEC = TypeAdapter(FleetSpec)


class PlanError(OpsError):
    """A file or object cannot be planned (the message says which and why)."""


@dataclasses.dataclass
class FileObjects:
    """The noderoll objects of the `-f` files by (kind, name) (later files win), and the documents skipped."""

    objects: dict[tuple[str, str], dict[str, Any]] = dataclasses.field(default_factory=dict)
    skipped: list[str] = dataclasses.field(default_factory=list)


def read_manifests(paths: list[str]) -> FileObjects:
    """Every Package and DeploymentPolicy in the files (`api.manifests` rules); a PlanError naming each
    file and document that cannot be read."""
    found = FileObjects()
    problems: list[str] = []
    for path in paths:
        name = "<stdin>" if path == STDIN else path
        raw, reason = read_file(path)
        parsed = ParsedSource(problem=SourceProblem(reason or "")) if raw is None else parse(raw)
        if parsed.problem is not None:
            line = f":{parsed.problem.line}" if parsed.problem.line else ""
            problems.append(f"{name}{line}: {parsed.problem.message}")
            continue
        manifests = manifest_objects(name, parsed.documents)
        problems += manifests.problems
        found.skipped += manifests.skipped
        found.objects |= {(o.kind, o.name): dict(o.obj) for o in manifests.objects}
    if problems:
        raise PlanError(f"{len(problems)} problem(s) in the files; nothing was planned:\n  " + "\n  ".join(problems))
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
    """Fleet -> its desired state, as the bridge would hand it over: a Package being deleted (its finalizer
    still on) is carried as an uninstall where its `uninstall` is enabled, and kept as it is while other
    Packages depend on it (`crd_bridge.protection`), so the plan shows its uninstall windows.

    Only the objects of the fleets planned are validated: an invalid object of another fleet does not
    stop the plan of this one."""
    found = usage(package_ref(o) for (kind, _), o in objects.items() if kind == keys.PACKAGE_KIND)
    packages: list[PackageFacts] = []
    for (kind, name), obj in sorted(objects.items()):
        fleet = raw_fleet(obj)
        if kind != keys.PACKAGE_KIND or only not in (None, fleet):
            continue
        model = _validated(kind, obj)
        assert isinstance(model, Package)
        meta = obj.get("metadata") or {}
        packages.append(PackageFacts(name, fleet, model, deleting=bool(meta.get("deletionTimestamp")),
                                     has_finalizer=keys.FINALIZER in (meta.get("finalizers") or []),
                                     held=name in found.held))
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


def known_fleets(objects: dict[tuple[str, str], dict[str, Any]], running: list[str]) -> set[str]:
    """The fleets there are: a DeploymentPolicy's (cluster or files), one a Package names, `default`, a running one."""
    named = {raw_fleet(obj) for (kind, _), obj in objects.items() if kind == keys.PACKAGE_KIND}
    return {name for kind, name in objects if kind == keys.POLICY_KIND} | named | {DEFAULT_FLEET} | set(running)


def unknown_fleet(only: str, known: set[str], files: bool) -> PlanError:
    """The error of a `--fleet` that names no fleet: which fleets there are, and the closest."""
    close = difflib.get_close_matches(only, sorted(known), n=1)
    where = "in the cluster or the files" if files else "in the cluster"
    return PlanError(f"--fleet {only}: no such fleet (no DeploymentPolicy {only} {where}, and no fleet of that "
                     f"name runs). The fleets are: {', '.join(sorted(known))}"
                     + (f"; did you mean {close[0]}?" if close else ""))


@dataclasses.dataclass
class RunningFleet:
    """What a running fleet holds and measured (None/empty when none runs)."""

    spec: FleetSpec | None = None
    timings: Timings = dataclasses.field(default_factory=Timings)
    wave: int = 0


async def running_fleet(ops: Ops, fleet: str) -> RunningFleet:
    """The running fleet's desired state, wave and window timings; empty when none runs (it never
    started, or its last run closed); a PlanError when it runs and does not answer."""
    try:
        progress = await ops.query_fleet(fleet)
        answer = await ops.ask_fleet(fleet, QUERY_FLEET_SPEC)
    except NoAnswer as err:
        if not err.running:
            return RunningFleet()
        raise PlanError(f"{err}: the plan cannot tell what the fleet rolls out now (which Packages changed, "
                        f"its wave, its measured windows), so it plans nothing (`noderoll status --fleet {fleet}` "
                        "shows the fleet)") from err
    spec = _SPEC.validate_python(answer) if answer else None
    return RunningFleet(spec, progress.timings, progress.wave)


def held_by_node_maintenance(ops: Ops) -> dict[str, str]:
    """Node -> the NodeMaintenance of another requestor holding it, as the fleet's listing reads them (a
    policy that respects them plans the node as held); {} where the CRD is not installed or not readable."""
    try:
        answer = ops.custom.list_cluster_custom_object(node_maintenance.GROUP, node_maintenance.VERSION,
                                                       node_maintenance.PLURAL)
    except ApiException as err:
        if err.status in (node_maintenance.FORBIDDEN, HTTPStatus.NOT_FOUND):
            return {}
        raise
    return node_maintenance.held_nodes_of(answer.get("items") or [])


async def build_plans(ops: Ops, files: FileObjects, only: str | None) -> list[FleetPlan]:
    """Every fleet's plan (module docstring)."""
    objects = {(keys.PACKAGE_KIND, o["metadata"]["name"]): o for o in await asyncio.to_thread(ops.list_packages)}
    policies = await asyncio.to_thread(ops.custom.list_cluster_custom_object, keys.GROUP, keys.VERSION,
                                       keys.POLICY_PLURAL)
    objects |= {(keys.POLICY_KIND, o["metadata"]["name"]): o for o in policies.get("items") or []}
    objects |= files.objects
    if only is not None and only not in known_fleets(objects, []):
        known = known_fleets(objects, await ops.running_fleets())
        if only not in known:
            raise unknown_fleet(only, known, bool(files.objects))
    held = await asyncio.to_thread(held_by_node_maintenance, ops)
    nodes = [node_view(node_facts(n), held.get(n.metadata.name, ""))
             for n in (await asyncio.to_thread(ops.core.list_node)).items]
    now = datetime.now(UTC).isoformat()
    plans = []
    for fleet, desired in desired_fleets(objects, only).items():
        running = await running_fleet(ops, fleet)
        plans.append(plan_fleet(PlanInput(desired, nodes, now, running.spec, running.timings, running.wave,
                                          cluster=ops.target.cluster)))
    return plans


def _windows_table(plan: FleetPlan, fleet_id: str) -> Table:
    table = Table(title=f"{fleet_id}: windows in batch order", title_justify="left")
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


def render_plan(plan: FleetPlan, cluster: str = "") -> Group:
    """One fleet's plan as text and tables (its workflow id `fleet/<policy>`, or the cluster's)."""
    fleet_id = fleet_workflow_id(plan.fleet, cluster)
    t = plan.totals
    changed = ", ".join(plan.changed) or ("policy only" if plan.policy_changed else "none")
    lines = [Text(f"{fleet_id} wave {plan.wave}: changes {changed}", style="bold"),
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
        parts.append(_windows_table(plan, fleet_id))
    if plan.skipped:
        skipped = Table(title=f"{fleet_id}: nodes skipped or blocked", title_justify="left")
        skipped.add_column("node")
        skipped.add_column("package: why")
        for node, reasons in plan.skipped.items():
            skipped.add_row(node, "; ".join(f"{p}: {why}" for p, why in reasons.items()))
        parts.append(skipped)
    return Group(*parts)


def plan_json(plans: list[FleetPlan], skipped: list[str] | None = None) -> dict[str, Any]:
    """Every fleet's plan as JSON (`changes` per fleet, and overall; `skipped`: the files' documents
    of other API groups left out)."""
    return {"changes": any(p.changes for p in plans), "skipped_documents": list(skipped or []),
            "fleets": [{**dataclasses.asdict(p), "changes": p.changes} for p in plans]}


def cmd_plan(args: argparse.Namespace) -> int:
    """`noderoll plan` (module docstring)."""
    try:
        files = read_manifests(args.file)
    except PlanError as err:
        print(f"noderoll plan: {err}", file=sys.stderr)
        return EXIT_ERROR
    for line in files.skipped:
        print(f"noderoll plan: {line}", file=sys.stderr)

    async def body(ops: Ops) -> int:
        plans = await build_plans(ops, files, args.fleet)
        if args.output == "json":
            print(json.dumps(plan_json(plans, files.skipped), indent=2, sort_keys=True))
        else:
            console = Console(width=None if sys.stdout.isatty() else 200)
            changing = [p for p in plans if p.changes]
            for plan in changing:
                console.print(render_plan(plan, ops.target.cluster))
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
                        help="Packages/DeploymentPolicies not yet applied, merged over the cluster's (repeatable; "
                             "- stdin; Lists expanded, other API groups' documents skipped with a note)")
    parser.add_argument("--fleet", metavar="POLICY", help="only this fleet (a DeploymentPolicy, or `default`)")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    parser.set_defaults(func=cmd_plan)
