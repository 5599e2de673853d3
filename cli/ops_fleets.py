"""Packages and their fleets, as the ops commands and the demo show them. Does I/O (through `Ops`).

Every Package is rolled out by one fleet, `fleet/<spec.deploymentPolicy>` (`fleet/default` when
it names none). A fleet answers one `progress` query for all of its Packages and nodes, so the
commands query each fleet once and take each Package's part from it (`.packages[name]`):

* `fleet_views`: every fleet known from the Package objects or running in Temporal, with its
  progress (or why it did not answer) and its Packages' views;
* `package_view`: one Package, from its fleet's progress; from the Package status the bridge wrote
  when the fleet cannot answer or does not carry it (yet); `source` says which;
* `signal_target`: the fleet and `protocol.fleet.Filter` a `pause|resume|halt|retry` goes to, with a
  clear error for an unknown Package, fleet or node.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from cli.ops_client import NoAnswer, NodeRow, Ops, OpsError, PackageView, progress_from_status
from planning.views.fleet_status import FleetProgress
from planning.views.status import package_view as package_progress
from protocol import names
from protocol.fleet import Filter, ProgressFilter

QUERY_SOURCE = "temporal query"


@dataclass
class FleetView:
    """A fleet as the commands show it: its progress (None when it did not answer) and its Packages."""

    name: str
    progress: FleetProgress | None
    # "temporal query", or why there is no answer.
    source: str
    packages: list[PackageView] = field(default_factory=list)

    @property
    def workflow_id(self) -> str:
        """`fleet/<name>`."""
        return names.fleet_workflow_id(self.name)


@dataclass(frozen=True)
class SignalTarget:
    """Where an operator signal goes: the fleet and the filter."""

    fleet: str
    scope: Filter
    # Notes for the user (stderr): the signal goes out anyway.
    notes: tuple[str, ...] = ()
    # The fleet's progress before the signal (None when it did not answer).
    progress: FleetProgress | None = None


def package_fleet(obj: dict[str, Any]) -> str:
    """The fleet of a Package object: its `spec.deploymentPolicy`, else `default`. Pure."""
    return names.fleet_name((obj.get("spec") or {}).get("deploymentPolicy"))


def _from_fleet(name: str, fleet: str, progress: FleetProgress, exists: bool = True) -> PackageView | None:
    part = progress.packages.get(name)
    # As the Package shows it (phase `Blocked`, blocked nodes named), like the bridge's status.
    return None if part is None else PackageView(name, package_progress(part), QUERY_SOURCE, exists, fleet)


def _from_status(name: str, obj: dict[str, Any], fleet: str, why: str) -> PackageView:
    return PackageView(name, progress_from_status(obj.get("status") or {}), f"Package status ({why})", True,
                       fleet=fleet)


async def _answer(ops: Ops, fleet: str, nodes: ProgressFilter | None = None) -> tuple[FleetProgress | None, str]:
    try:
        return await ops.query_fleet(fleet, nodes), QUERY_SOURCE
    except NoAnswer as err:
        return None, str(err)


def _package_views(fleet: str, progress: FleetProgress | None, source: str,
                   objects: dict[str, dict[str, Any]]) -> list[PackageView]:
    views = []
    for name in sorted(set(objects) | set(progress.packages if progress else ())):
        obj = objects.get(name)
        view = _from_fleet(name, fleet, progress, obj is not None) if progress else None
        if view is None and obj is not None:
            why = source if progress is None else f"{names.fleet_workflow_id(fleet)} does not carry it (yet)"
            view = _from_status(name, obj, fleet, why)
        if view is not None:
            views.append(view)
    return views


async def fleet_views(ops: Ops, only: str | None = None) -> list[FleetView]:
    """Every fleet (or only `only`) with its Packages; OpsError for an unknown `only`."""
    by_fleet: dict[str, dict[str, dict[str, Any]]] = {}
    for obj in await asyncio.to_thread(ops.list_packages):
        by_fleet.setdefault(package_fleet(obj), {})[obj["metadata"]["name"]] = obj
    for fleet in await ops.running_fleets():
        by_fleet.setdefault(fleet, {})
    if only is not None:
        if only not in by_fleet:
            known = ", ".join(sorted(by_fleet)) or "none"
            raise OpsError(f"no fleet {only}: no Package names DeploymentPolicy {only} and "
                           f"{names.fleet_workflow_id(only)} is not running (fleets: {known})")
        by_fleet = {only: by_fleet[only]}
    # Asked together: a fleet whose worker does not poll costs one query timeout, not one per fleet.
    fleets = sorted(by_fleet)
    answers = await asyncio.gather(*(_answer(ops, fleet) for fleet in fleets))
    return [FleetView(fleet, progress, source, _package_views(fleet, progress, source, by_fleet[fleet]))
            for fleet, (progress, source) in zip(fleets, answers, strict=True)]


async def fleet_view(ops: Ops, fleet: str, packages: list[str], nodes: ProgressFilter | None = None) -> FleetView:
    """One fleet and the given Packages of it (the demo's poll: one query and a read per Package); with `nodes`,
    the nodes of the fleet it asks for too."""
    progress, source = await _answer(ops, fleet, nodes)
    objects = {}
    for name in packages:
        obj = await asyncio.to_thread(ops.read_package, name)
        if obj is not None:
            objects[name] = obj
    views = [v for v in _package_views(fleet, progress, source, objects) if v.name in packages]
    return FleetView(fleet, progress, source, views)


async def package_view(ops: Ops, name: str) -> PackageView:
    """One Package from its fleet's progress, else its status; OpsError when neither knows it."""
    obj = await asyncio.to_thread(ops.read_package, name)
    if obj is None:
        # Deleted (its uninstall may still run): a fleet carrying it says so in its search attribute.
        for fleet in await ops.running_fleets(name):
            progress, _ = await _answer(ops, fleet)
            view = _from_fleet(name, fleet, progress, exists=False) if progress else None
            if view is not None:
                return view
        raise OpsError(f"no Package {name} (`kubectl get packages` lists them) and no running fleet carries it")
    fleet = package_fleet(obj)
    progress, source = await _answer(ops, fleet)
    view = _from_fleet(name, fleet, progress) if progress else None
    if view is not None:
        return view
    why = source if progress is None else f"{names.fleet_workflow_id(fleet)} does not carry it (yet)"
    return _from_status(name, obj, fleet, why)


async def signal_target(ops: Ops, package: str | None, fleet: str | None, nodes: list[str]) -> SignalTarget:
    """The fleet and filter of a signal for `package` (filter packages=[package]) or a whole `fleet`."""
    notes: list[str] = []
    if package is not None:
        obj = await asyncio.to_thread(ops.read_package, package)
        if obj is None:
            carriers = await ops.running_fleets(package)
            if not carriers:
                raise OpsError(f"no Package {package} (`kubectl get packages` lists them); "
                               "use --fleet POLICY to signal a whole fleet")
            fleet = carriers[0]
            notes.append(f"Package {package} no longer exists; {names.fleet_workflow_id(fleet)} still carries it")
        else:
            fleet = package_fleet(obj)
    assert fleet is not None
    progress, _ = await _answer(ops, fleet, ProgressFilter(nodes=list(nodes)) if nodes else None)
    if progress is not None:
        unknown = sorted(set(nodes) - set(progress.nodes))
        if unknown:
            raise OpsError(f"not a node of {names.fleet_workflow_id(fleet)}: {', '.join(unknown)} "
                           f"(it has {progress.total_nodes} node(s); `noderoll nodes --fleet {fleet}` lists them)")
        if package is not None and package not in progress.packages:
            notes.append(f"{names.fleet_workflow_id(fleet)} does not carry {package} yet "
                         f"(is it Invalid? `noderoll status {package}`)")
    scope = Filter(packages=[package] if package else [], nodes=list(nodes))
    return SignalTarget(fleet, scope, tuple(notes), progress)


async def attach_fleet_nodes(ops: Ops, nodes: list[NodeRow], fleets: list[FleetView]) -> None:
    """Give each node what every fleet that answered reports for it (state, disruptions): each fleet lists its
    nodes a page at a time (`Ops.fleet_nodes`)."""
    for fleet in fleets:
        if fleet.progress is None:
            continue
        try:
            reports = await ops.fleet_nodes(fleet.name)
        except NoAnswer:
            continue
        for node in nodes:
            reported = reports.get(node.name)
            if reported is not None:
                node.fleets[fleet.name] = reported
