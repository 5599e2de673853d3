"""The fleet's state as continue-as-new carries it: compact at any fleet size. Pure (deterministic).

The whole `FleetState` as JSON was about 235 bytes per node (its targets with their fingerprints, its
records, disruptions and order per node, its planner's node lists): 2.4 MB at 10,000 nodes, over Temporal's
2 MB limit on one payload, so a 10,000-node fleet could not continue as new (issue 45). `pack` writes it as:

* every node named once, in `names` (sorted: the names of a fleet share long prefixes and compress well);
* the targets of each node as an index into a list of the distinct targets (`targets`); the fingerprint of a
  node's targets is dropped unless its window is out (only an answer reads it, `fleet_state.record_result`; a
  listing compares the records' fingerprints with the new listing's, not with the old);
* records and disruptions grouped likewise (distinct values, each node an index); the order the wave asked
  its nodes in as one position per name (-1: not asked);
* each compartment's nodes as indices into `names` (the planner keeps them sorted by its order key, computed
  again from the names: `planning.rollout.compartments.order_key`);
* the rest as it is; then the JSON compressed (zlib) and written in base64 under `packed`.

`unpack` reverses it; a carry written before (no `packed`) is read as it is. Both run in the fleet workflow:
the output depends only on the state.

A listing's result (`list_fleet_nodes`: every node's targets) is packed the same way (`pack_selection`,
`unpack_selection`): 125 bytes per node as plain JSON, 1.25 MB at 10,000 nodes, in the fleet's history at
every listing.
"""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

from planning.rollout.compartments import order_key

FORMAT = 2
# The keys of the packed form.
PACKED, VERSION = "packed", "format"


def _index(values: list[Any]) -> tuple[list[Any], list[int]]:
    """The distinct values (first seen first) and each value's index among them."""
    seen: dict[str, int] = {}
    distinct: list[Any] = []
    indices = []
    for value in values:
        key = json.dumps(value, sort_keys=True)
        if key not in seen:
            seen[key] = len(distinct)
            distinct.append(value)
        indices.append(seen[key])
    return distinct, indices


def pack(data: dict[str, Any]) -> dict[str, Any]:
    """The compact form of a state's JSON (`planning.fleet.codec.state_to_json` before this; module docstring)."""
    data = dict(data)
    targets: dict[str, Any] = data.pop("targets")
    records: dict[str, Any] = data.pop("records")
    disruptions: dict[str, Any] = data.pop("disruptions")
    order: dict[str, int] = data.pop("node_order")
    planner = data.get("planner")
    compartments = (planner or {}).get("compartments") or {}
    names = sorted({*targets, *records, *disruptions, *order,
                    *(n for c in compartments.values() for n in c.get("nodes") or [])})
    position = {name: i for i, name in enumerate(names)}
    in_flight = data.get("in_flight") or {}
    kept = [{k: v for k, v in targets[n].items() if k != "fingerprint" or n in in_flight} if n in targets else None
            for n in names]
    distinct_targets, target_of = _index(kept)
    distinct_records, record_of = _index([records.get(n) for n in names])
    distinct_disruptions, disruption_of = _index([disruptions.get(n) for n in names])
    if planner is not None:
        planner = dict(planner)
        planner["compartments"] = {name: {**c, "nodes": sorted(position[n] for n in c.get("nodes") or [])}
                                   for name, c in compartments.items()}
        data["planner"] = planner
    data["nodes"] = {
        "names": names, "targets": distinct_targets, "target_of": target_of,
        "records": distinct_records, "record_of": record_of,
        "disruptions": distinct_disruptions, "disruption_of": disruption_of,
        "order": [order.get(n, -1) for n in names],
    }
    text = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    return {VERSION: FORMAT, PACKED: base64.b64encode(zlib.compress(text, 9)).decode()}


def unpack(carry: dict[str, Any]) -> dict[str, Any]:
    """The state's JSON from a carry (`pack`'s, or one written before it, as it is)."""
    if PACKED not in carry:
        return carry
    data: dict[str, Any] = json.loads(zlib.decompress(base64.b64decode(carry[PACKED])))
    nodes = data.pop("nodes")
    names: list[str] = nodes["names"]
    data["targets"] = {n: nodes["targets"][i] for n, i in zip(names, nodes["target_of"], strict=True)
                       if nodes["targets"][i] is not None}
    data["records"] = {n: nodes["records"][i] for n, i in zip(names, nodes["record_of"], strict=True)
                       if nodes["records"][i] is not None}
    data["disruptions"] = {n: nodes["disruptions"][i] for n, i in zip(names, nodes["disruption_of"], strict=True)
                           if nodes["disruptions"][i] is not None}
    data["node_order"] = {n: p for n, p in zip(names, nodes["order"], strict=True) if p >= 0}
    planner = data.get("planner")
    if planner is not None:
        identity = planner["identity"]
        for compartment in planner["compartments"].values():
            members = [names[i] for i in compartment["nodes"]]
            compartment["nodes"] = sorted(members, key=lambda n: (order_key(n, identity), n))
    return data


def pack_selection(data: dict[str, Any]) -> dict[str, Any]:
    """The compact form of a listing's `FleetSelection` JSON: names, distinct targets, fingerprints, zlib."""
    nodes: dict[str, Any] = data.get("nodes") or {}
    names = sorted(nodes)
    distinct, target_of = _index([{k: v for k, v in nodes[n].items() if k != "fingerprint"} for n in names])
    packed = {"names": names, "targets": distinct, "target_of": target_of,
              "fingerprints": [nodes[n].get("fingerprint", "") for n in names]}
    text = json.dumps(packed, sort_keys=True, separators=(",", ":")).encode()
    return {VERSION: FORMAT, PACKED: base64.b64encode(zlib.compress(text, 9)).decode()}


def unpack_selection(data: dict[str, Any]) -> dict[str, Any]:
    """A listing's `FleetSelection` JSON from `pack_selection`'s form (or one written before it, as it is)."""
    if PACKED not in data:
        return data
    packed = json.loads(zlib.decompress(base64.b64decode(data[PACKED])))
    nodes = {}
    for name, index, fingerprint in zip(packed["names"], packed["target_of"], packed["fingerprints"], strict=True):
        targets = dict(packed["targets"][index])
        if fingerprint:
            targets["fingerprint"] = fingerprint
        nodes[name] = targets
    return {"nodes": nodes}
