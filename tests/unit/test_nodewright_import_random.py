"""`noderoll import` on random input (hypothesis): it never crashes, and whatever it writes is valid.

* Skyhooks and DeploymentPolicies valid under NodeWright's schema and webhook (as its CRDs and
  `Validate` functions describe them): every package is imported, every document written passes
  `check_document` and the cross-document checks, and the notes are only `not carried` or `note`.
* Skyhook-shaped input with arbitrary values in any field: no exception; every document written is
  valid; every object read either yields documents or a `not imported` note naming a field.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.nodewright_import import ImportResult, Severity, import_documents
from api.validation import check_document, validate_documents

NAME = st.from_regex(r"[a-z][a-z0-9-]{0,8}[a-z]", fullmatch=True)
VERSION = st.sampled_from(["1.0.0", "1.2", "2.3.1-test", "2024.7.7-test", "0.1.3", "v1.4.2", "3"])
IMAGE = st.sampled_from(["ghcr.io/nvidia/skyhook-packages/shellscript", "localhost:5000/org/pkg", "alpine",
                         "nvcr.io/nvidia/tuned:ignored-tag"])
LABEL = st.from_regex(r"[a-z]([a-z0-9.-]{0,10}[a-z0-9])?", fullmatch=True)
SELECTOR = st.fixed_dictionaries({}, optional={
    "matchLabels": st.dictionaries(LABEL, LABEL, max_size=2),
    "matchExpressions": st.lists(st.one_of(
        st.fixed_dictionaries({"key": LABEL, "operator": st.sampled_from(["In", "NotIn"]),
                               "values": st.lists(LABEL, min_size=1, max_size=2)}),
        st.fixed_dictionaries({"key": LABEL, "operator": st.sampled_from(["Exists", "DoesNotExist"])})), max_size=2),
})
UNIT = st.from_regex(r"[a-z][a-z0-9-]{0,6}(\.service)?", fullmatch=True)
INTERRUPT = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["reboot", "noop", "restartAllServices"])}),
    st.fixed_dictionaries({"type": st.just("service"), "services": st.lists(UNIT, min_size=1, max_size=3)}),
)
QUANTITY = st.sampled_from(["100m", "250m", "1", "64Mi", "128Mi", "1Gi"])
DURATION = st.sampled_from(["30s", "5m", "1h30m", "0s", "2.5s"])
TOLERATION = st.one_of(
    st.fixed_dictionaries({"key": LABEL, "operator": st.just("Exists")},
                          optional={"effect": st.sampled_from(["NoSchedule", "NoExecute"])}),
    st.fixed_dictionaries({"key": LABEL, "value": LABEL}, optional={"effect": st.just("NoSchedule")}),
)
STRATEGY_FIELDS = {"initialBatch": st.integers(1, 10), "batchThreshold": st.integers(1, 100),
                   "failureThreshold": st.integers(1, 5), "safetyLimit": st.integers(1, 100)}
STRATEGY = st.one_of(
    st.fixed_dictionaries({"fixed": st.fixed_dictionaries({}, optional=STRATEGY_FIELDS)}),
    st.fixed_dictionaries({"linear": st.fixed_dictionaries({}, optional={**STRATEGY_FIELDS,
                                                                         "delta": st.integers(1, 4)})}),
    st.fixed_dictionaries({"exponential": st.fixed_dictionaries({}, optional={**STRATEGY_FIELDS,
                                                                              "growthFactor": st.integers(2, 4)})}),
)
BUDGET = st.one_of(st.fixed_dictionaries({"count": st.integers(1, 20)}),
                   st.fixed_dictionaries({"percent": st.integers(1, 100)}))


@st.composite
def packages(draw: st.DrawFn) -> dict[str, Any]:
    """A DAG of valid NodeWright packages (dependencies on earlier ones, at their version)."""
    names = draw(st.lists(NAME, min_size=1, max_size=4, unique=True))
    out: dict[str, Any] = {}
    for name in names:
        keys = draw(st.lists(st.from_regex(r"[a-z]{1,4}\.(conf|sh)", fullmatch=True), max_size=3, unique=True))
        package: dict[str, Any] = {"version": draw(VERSION), "image": draw(IMAGE)}
        optional = draw(st.fixed_dictionaries({}, optional={
            "interrupt": INTERRUPT,
            "env": st.lists(st.fixed_dictionaries({"name": st.from_regex(r"[A-Z_]{1,6}", fullmatch=True),
                                                   "value": st.text(max_size=5)}), max_size=2),
            "resources": st.fixed_dictionaries({"cpuRequest": st.just("100m"), "cpuLimit": st.just("1"),
                                                "memoryRequest": st.just("64Mi"), "memoryLimit": st.just("1Gi")}),
            "uninstall": st.fixed_dictionaries({"enabled": st.just(True), "apply": st.booleans()}),
            "agentImageOverride": st.just("nvcr.io/nvidia/skyhook/agent:6.4.1"),
            "containerSHA": st.just("sha256:" + "0f" * 32),
            "gracefulShutdown": DURATION,
        }))
        package.update(optional)
        if keys:
            package["configMap"] = {key: draw(st.text(max_size=20)) for key in keys}
            if draw(st.booleans()):
                pattern = draw(st.sampled_from([keys[0], "*." + keys[0].split(".")[1], f"[{keys[0][0]}]*"]))
                package["configInterrupts"] = {pattern: draw(INTERRUPT)}
        earlier = list(out)
        deps = draw(st.lists(st.sampled_from(earlier), unique=True, max_size=2)) if earlier else []
        if deps:
            package["dependsOn"] = {dep: out[dep]["version"] for dep in deps}
        out[name] = package
    return out


@st.composite
def valid_input(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Skyhooks (either group) with distinct package names, and the policies they name."""
    docs: list[dict[str, Any]] = []
    used: set[str] = set()
    policies = draw(st.lists(NAME.filter(lambda n: n != "default"), max_size=2, unique=True))
    for policy in policies:
        docs.append({"apiVersion": "skyhook.nvidia.com/v1alpha1", "kind": "DeploymentPolicy",
                     "metadata": {"name": policy},
                     "spec": {"default": {"budget": draw(BUDGET), "strategy": draw(STRATEGY)},
                              "resetBatchStateOnCompletion": draw(st.booleans())}})
    for index in range(draw(st.integers(1, 3))):
        pkgs = {k: v for k, v in draw(packages()).items() if k not in used}
        pkgs = {k: v for k, v in pkgs.items() if set(v.get("dependsOn", {})) <= set(pkgs)}
        used |= set(pkgs)
        spec: dict[str, Any] = {"packages": pkgs}
        spec.update(draw(st.fixed_dictionaries({}, optional={
            "nodeSelectors": SELECTOR, "podNonInterruptLabels": SELECTOR,
            "additionalTolerations": st.lists(TOLERATION, max_size=2), "runtimeRequired": st.booleans(),
            "autoTaintNewNodes": st.booleans(), "priority": st.integers(1, 300), "serial": st.booleans(),
            "sequencing": st.sampled_from(["node", "all"]),
            "drainConfig": st.fixed_dictionaries({}, optional={
                "timeout": DURATION, "gracePeriod": DURATION, "deleteEmptyDirData": st.booleans(),
                "disableEviction": st.booleans(), "force": st.booleans(), "ignoreDaemonSets": st.booleans()}),
        })))
        if policies and draw(st.booleans()):
            spec["deploymentPolicy"] = draw(st.sampled_from(policies))
        elif draw(st.booleans()):
            spec["interruptionBudget"] = draw(st.one_of(st.fixed_dictionaries({"count": st.integers(0, 9)}),
                                                        st.fixed_dictionaries({"percent": st.integers(0, 100)})))
        kind, group = draw(st.sampled_from([("Skyhook", "skyhook.nvidia.com"), ("NodeWright", "nodewright.nvidia.com")]))
        docs.append({"apiVersion": f"{group}/v1alpha1", "kind": kind, "metadata": {"name": f"skyhook-{index}"},
                     "spec": spec})
    return docs


def assert_written_documents_are_valid(result: ImportResult) -> None:
    docs = [item.document for item in result.documents]
    for doc in docs:
        assert check_document(doc).valid, (doc, check_document(doc).problems)
    assert validate_documents(docs, policies_known=False).problems == []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_input())
def test_valid_nodewright_input_is_imported_whole(docs: list[dict[str, Any]]) -> None:
    result = import_documents(docs)
    assert_written_documents_are_valid(result)
    assert [n for n in result.notes if n.severity is Severity.NOT_IMPORTED] == []
    expected = sum(len(d["spec"]["packages"]) for d in docs if d["kind"] != "DeploymentPolicy")
    assert sum(1 for i in result.documents if i.document["kind"] == "Package") == expected
    # The policies named are written too, so the references resolve.
    assert validate_documents([i.document for i in result.documents]).problems == []


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 200) | st.floats(allow_nan=False, width=16) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


def anything_or(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`valid` 9 times in 10, else anything."""
    return st.integers(0, 9).flatmap(lambda roll: JSON if roll == 9 else valid)


@st.composite
def skyhook_shaped(draw: st.DrawFn) -> list[Any]:
    """Skyhook-shaped documents whose fields may hold anything."""
    optional = {
        "interrupt": INTERRUPT, "dependsOn": st.dictionaries(st.sampled_from(["a", "b", "z"]), VERSION, max_size=2),
        "configMap": st.just({"a.conf": "x"}), "configInterrupts": st.just({"*.conf": {"type": "reboot"}}),
        "env": st.just([{"name": "A", "value": "1"}]), "resources": st.just({"cpuRequest": "1"}),
        "uninstall": st.just({"enabled": True}), "containerSHA": st.just("sha256:" + "1" * 64),
        "agentImageOverride": st.just("a/b:1"), "gracefulShutdown": DURATION, "name": NAME,
    }
    package = anything_or(st.fixed_dictionaries(
        {"version": anything_or(VERSION), "image": anything_or(IMAGE)},
        optional={field: anything_or(valid) for field, valid in optional.items()}))
    spec = anything_or(st.fixed_dictionaries({}, optional={
        "packages": anything_or(st.dictionaries(st.sampled_from(["a", "b", "c-d"]), package, max_size=3)),
        "nodeSelectors": anything_or(SELECTOR), "podNonInterruptLabels": anything_or(SELECTOR),
        "interruptionBudget": anything_or(BUDGET), "deploymentPolicy": anything_or(NAME),
        "additionalTolerations": anything_or(st.lists(TOLERATION, max_size=1)),
        "drainConfig": anything_or(st.just({"timeout": "1m"})), "runtimeRequired": anything_or(st.booleans()),
        "priority": anything_or(st.integers(1, 300)), "sequencing": anything_or(st.sampled_from(["node", "all"])),
        "deploymentPolicyOptions": anything_or(st.just({"resetBatchStateOnCompletion": False})),
        "pause": anything_or(st.booleans()), "autoTaintNewNodes": anything_or(st.booleans()),
    }))
    policy_spec = anything_or(st.fixed_dictionaries({"default": anything_or(st.fixed_dictionaries({
        "budget": anything_or(BUDGET), "strategy": anything_or(STRATEGY)}))}, optional={
        "compartments": anything_or(st.lists(st.fixed_dictionaries({
            "name": anything_or(st.text(max_size=6)), "selector": anything_or(SELECTOR),
            "budget": anything_or(BUDGET)}, optional={"strategy": anything_or(STRATEGY)}), max_size=2))}))
    docs: list[Any] = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["Skyhook", "NodeWright", "DeploymentPolicy"]))
        group = draw(st.sampled_from(["skyhook.nvidia.com", "nodewright.nvidia.com"]))
        meta = anything_or(st.fixed_dictionaries({"name": NAME}, optional={
            "annotations": anything_or(st.just({f"{group}/pause": "true"}))}))
        docs.append({"apiVersion": f"{group}/v1alpha1", "kind": kind, "metadata": draw(meta),
                     "spec": draw(policy_spec if kind == "DeploymentPolicy" else spec)})
    if draw(st.booleans()):
        docs.append(draw(JSON))
    return docs


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(skyhook_shaped())
def test_any_skyhook_shaped_input_never_crashes_and_writes_only_valid_documents(docs: list[Any]) -> None:
    result = import_documents(docs)
    assert_written_documents_are_valid(result)
    for note in result.notes:
        assert note.severity in set(Severity) and note.message and str(note).count(": ") >= 3
    sources = {item.source for item in result.documents} | {n.source for n in result.notes}
    read = [i for i, d in enumerate(docs) if isinstance(d, dict) and d.get("kind") in ("Skyhook", "NodeWright",
                                                                                       "DeploymentPolicy")]
    assert set(read) <= sources  # every NodeWright object read is accounted for: documents or notes
