"""The Helm chart renders with every CI values file; its RBAC grants exactly what the code calls.

Rendering uses the real helm binary (scripts/install-helm); the tests skip, saying why, when it is not
installed. Server-side validation of the rendered objects is in tests/integration/test_helm_dry_run.py.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.helm import CHART, CI_VALUES, INSTALL_HINT, ROOT, Render, find_binary, render

HELM = find_binary("helm")
needs_helm = pytest.mark.skipif(HELM is None, reason=f"helm is not installed: {INSTALL_HINT}")

VERBS = {
    "create": "create",
    "read": "get",
    "get": "get",
    "list": "list",
    "patch": "patch",
    "replace": "update",
    "delete": "delete",
    "delete_collection": "deletecollection",
}
CORE, BATCH, COORD, NODEROLL = "", "batch", "coordination.k8s.io", "noderoll.io"
RESOURCES = {
    "node": (CORE, "nodes"),
    "node_status": (CORE, "nodes/status"),
    "pod": (CORE, "pods"),
    "pod_eviction": (CORE, "pods/eviction"),
    "pod_log": (CORE, "pods/log"),
    "event": (CORE, "events"),
    "config_map": (CORE, "configmaps"),
    "namespace": (CORE, "namespaces"),
    "job": (BATCH, "jobs"),
    "lease": (COORD, "leases"),
}
# Raw requests (`kube.request_json`, `call_api`) cannot be derived from a method name: each module
# using them is listed with the (group, resource, verb) they need. A module with a new raw request
# fails the test until it is listed here. (GET /apis/policy/v1 is discovery: no RBAC rule needed.)
RAW_CALLS: dict[str, set[tuple[str, str, str]]] = {
    "activities/drain.py": {("policy", "poddisruptionbudgets", "list"), (CORE, "pods/eviction", "create")},
}
# The module that implements raw requests (it makes none of its own).
RAW_HELPER = "kube/__init__.py"
RAW = re.compile(r"\b(request_json|call_api)\(")
# Granted although no client call shows it, and why.
GRANTED_WITHOUT_CALL = {
    # Setting metadata.finalizers needs update on <kind>/finalizers where the
    # OwnerReferencesPermissionEnforcement admission plugin is enabled.
    (NODEROLL, "packages/finalizers", "update"),
    (NODEROLL, "deploymentpolicies/finalizers", "update"),
}
# A typed client method's name: verb, namespaced or not, resource, all namespaces or not.
METHOD = r"\.(create|read|get|list|patch|replace|delete_collection|delete)_(namespaced_)?([a-z_]+?)(_for_all_namespaces)?"
CALL = re.compile(METHOD + r"\(")
# `kube.untyped(core.create_namespaced_pod, ns, body)`: the typed method passed with its arguments.
UNTYPED_CALL = re.compile(r"\buntyped\(\s*[\w.()]*?" + METHOD + ",")
# In a module that watches (`watch.Watch().stream(...)`, or the adapter's `kube.watching.watch_from`),
# every list function it names, called or passed around (`CoreV1Api(...).list_node`), is watched too.
WATCHES = re.compile(r"\.stream\(|\bwatch_from\(")
LIST_REF = re.compile(r"\.list_(namespaced_)?([a-z_]+?)(_for_all_namespaces)?\b")


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    assert HELM is not None
    return {path.stem: render(HELM, Render(values=path)) for path in CI_VALUES}


def kinds(objects: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        out.setdefault(obj["kind"], []).append(obj)
    return out


def by_name(objects: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(suffix))


def test_ci_values_files_exist() -> None:
    assert len(CI_VALUES) >= 3
    for path in CI_VALUES:
        assert isinstance(yaml.safe_load(path.read_text()), dict)


def test_chart_crds_are_copies_of_deploy_crds() -> None:
    source = {p.name: p.read_text() for p in (ROOT / "deploy" / "crds").glob("*.yaml")}
    copies = {p.name: p.read_text() for p in (CHART / "files" / "crds").glob("*.yaml")}
    assert source, "deploy/crds holds no CRD"
    assert copies == source, "run: cp deploy/crds/*.yaml deploy/helm/noderoll/files/crds/"


@needs_helm
def test_every_values_file_renders_both_processes(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for name, objects in rendered.items():
        deployments = {d["metadata"]["name"].rsplit("-", 1)[1]: d for d in kinds(objects)["Deployment"]}
        assert set(deployments) == {"worker", "bridge", "webhook"}, name
        for process, dep in deployments.items():
            container = dep["spec"]["template"]["spec"]["containers"][0]
            assert container["args"][0] == process
            if process == "webhook":
                continue  # no Temporal connection (tests/unit/test_webhook_chart.py)
            env = {e["name"] for e in container["env"]}
            assert {
                "NODEROLL_TEMPORAL_ADDRESS",
                "NODEROLL_TEMPORAL_NAMESPACE",
                "NODEROLL_TASK_QUEUE",
                "NODEROLL_METRICS_PORT",
            } <= env
            assert dep["spec"]["template"]["spec"]["serviceAccountName"].endswith(process)
            assert container["securityContext"]["allowPrivilegeEscalation"] is False


@needs_helm
def test_crds_rendered_from_files_and_kept(rendered: dict[str, list[dict[str, Any]]]) -> None:
    crds = kinds(rendered["default-values"]).get("CustomResourceDefinition", [])
    files = list((CHART / "files" / "crds").glob("*.yaml"))
    assert len(crds) == len(files) > 0
    for crd in crds:
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert "CustomResourceDefinition" not in kinds(rendered["cloud-values"])


@needs_helm
def test_package_namespace_is_privileged(rendered: dict[str, list[dict[str, Any]]]) -> None:
    ns = kinds(rendered["default-values"])["Namespace"][0]
    assert ns["metadata"]["name"] == "noderoll-system"
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert "Namespace" not in kinds(rendered["servicemonitor-values"])


@needs_helm
def test_tls_and_api_key_come_from_secrets(rendered: dict[str, list[dict[str, Any]]]) -> None:
    tls = by_name(rendered["tls-values"], "Deployment", "worker")["spec"]["template"]["spec"]
    assert tls["volumes"][-1]["secret"]["secretName"] == "temporal-client-tls"
    env = {e["name"]: e for e in tls["containers"][0]["env"]}
    assert env["NODEROLL_TEMPORAL_TLS_CERT"]["value"].startswith("/etc/noderoll/temporal-tls/")
    assert tls["nodeSelector"] and tls["tolerations"] and tls["affinity"]
    cloud = by_name(rendered["cloud-values"], "Deployment", "bridge")["spec"]["template"]["spec"]
    env = {e["name"]: e for e in cloud["containers"][0]["env"]}
    assert env["NODEROLL_TEMPORAL_API_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "temporal-cloud"
    assert cloud["containers"][0]["image"].endswith("@sha256:" + "0" * 64)


@needs_helm
def test_servicemonitors_are_optional(rendered: dict[str, list[dict[str, Any]]]) -> None:
    assert "ServiceMonitor" not in kinds(rendered["default-values"])
    monitors = kinds(rendered["servicemonitor-values"])["ServiceMonitor"]
    assert {m["metadata"]["name"].rsplit("-", 1)[1] for m in monitors} == {"worker", "bridge"}


@needs_helm
def test_environment_set_by_the_chart_is_read_by_the_code(rendered: dict[str, list[dict[str, Any]]]) -> None:
    sources = "".join(
        path.read_text() for d in ("worker", "service", "crd_bridge", "activities", "kube", "metrics", "localstack", "api", "webhook")
        for path in (ROOT / d).rglob("*.py")
    )
    extra = {e["name"] for e in yaml.safe_load((CHART / "ci" / "cloud-values.yaml").read_text())["worker"]["extraEnv"]}
    for objects in rendered.values():
        for dep in kinds(objects)["Deployment"]:
            for env in dep["spec"]["template"]["spec"]["containers"][0]["env"]:
                if env["name"] not in extra:
                    assert env["name"] in sources, f"{env['name']} is set by the chart but read by no module"


def test_release_namespace_must_not_be_the_package_namespace() -> None:
    if HELM is None:
        pytest.skip(f"helm is not installed: {INSTALL_HINT}")
    with pytest.raises(subprocess.CalledProcessError):
        render(HELM, Render(namespace="noderoll-system"))


@needs_helm
def test_pdb_api_follows_kubernetes_version() -> None:
    assert HELM is not None
    old = kinds(render(HELM, Render(kube_version="1.20.2")))["PodDisruptionBudget"][0]
    new = kinds(render(HELM, Render(kube_version="1.30.0")))["PodDisruptionBudget"][0]
    assert (old["apiVersion"], new["apiVersion"]) == ("policy/v1beta1", "policy/v1")


@needs_helm
def test_two_bridges_need_leader_election() -> None:
    assert HELM is not None
    with pytest.raises(Exception, match="leaderElection"):
        render(HELM, Render(sets={"bridge.replicas": "2", "leaderElection.enabled": "false"}))


# --- RBAC against the code --------------------------------------------------------------------------


def module_files(package: str) -> list[Path]:
    return sorted((ROOT / package).glob("*.py"))


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def process_files(process: str) -> list[Path]:
    """Files whose Kubernetes calls run in `process`: its package plus the activity and `kube` modules it
    imports, and `service` (the start-up both share: the cluster guard reads kube-system)."""
    if process == "worker":
        return module_files("activities") + module_files("kube") + module_files("service")
    if process == "webhook":
        return module_files("webhook")
    files = set(module_files("crd_bridge")) | set(module_files("service"))
    todo = list(files)
    while todo:
        for module in imported_modules(todo.pop()):
            top, _, rest = module.partition(".")
            candidate = ROOT / top / f"{rest}.py"
            if (
                top in ("activities", "crd_bridge", "kube")
                and rest
                and candidate.is_file()
                and candidate not in files
            ):
                files.add(candidate)
                todo.append(candidate)
    return sorted(files)


def call_args(text: str, start: int) -> str:
    """The argument text of the call whose "(" is just before `start` (balanced parentheses)."""
    depth = 1
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i]
    return text[start:]


def plural_args(call_text: str) -> set[str]:
    found = set()
    if "PACKAGE" in call_text or '"packages"' in call_text:
        found.add("packages")
    if "POLICY" in call_text or '"deploymentpolicies"' in call_text:
        found.add("deploymentpolicies")
    return found or {"packages", "deploymentpolicies"}


def custom_resources(call_text: str, module_text: str) -> set[tuple[str, str]]:
    """(group, plural) a custom-object call reads: another group's when the module defines its `GROUP`
    and `PLURAL` constants and the call names them (kube/node_maintenance.py), else noderoll's own."""
    group = re.search(r'^GROUP = "([^"]+)"', module_text, re.MULTILINE)
    plural = re.search(r'^PLURAL = "([^"]+)"', module_text, re.MULTILINE)
    if group and plural and group.group(1) != NODEROLL and "PLURAL" in call_text:
        return {(group.group(1), plural.group(1))}
    return {(NODEROLL, p) for p in plural_args(call_text)}


def required_rules(process: str) -> set[tuple[str, str, str, bool]]:
    """(group, resource, verb, package_namespace_only) for every client call of `process`."""
    needed: set[tuple[str, str, str, bool]] = set()
    for path in process_files(process):
        text = path.read_text()
        rel = str(path.relative_to(ROOT))
        if rel != RAW_HELPER and RAW.search(text):
            assert rel in RAW_CALLS, f"{rel} makes raw API requests: list what they need in RAW_CALLS"
            needed |= {(g, r, v, False) for g, r, v in RAW_CALLS[rel]}
        calls = [(m, call_args(text, m.end())) for m in CALL.finditer(text)]
        calls += [(m, call_args(text, text.index("(", m.start()) + 1)) for m in UNTYPED_CALL.finditer(text)]
        for match, args in calls:
            verb, namespaced, noun, _all = match.groups()
            in_pkg_ns = bool(namespaced) and "PACKAGE_POD_NAMESPACE" in args
            if noun.startswith("cluster_custom_object"):
                sub = "/status" if noun.endswith("_status") else ""
                needed |= {(g, p + sub, VERBS[verb], False) for g, p in custom_resources(args, text)}
            elif noun in RESOURCES:
                group, resource = RESOURCES[noun]
                needed.add((group, resource, VERBS[verb], in_pkg_ns))
        if not WATCHES.search(text):
            continue
        for match in LIST_REF.finditer(text):
            namespaced, noun, _all = match.groups()
            after = text[match.end() : match.end() + 300]
            in_pkg_ns = bool(namespaced) and "PACKAGE_POD_NAMESPACE" in after
            if noun.startswith("cluster_custom_object"):
                needed |= {(NODEROLL, p, v, False) for p in plural_args(after) for v in ("list", "watch")}
            elif noun in RESOURCES:
                group, resource = RESOURCES[noun]
                needed |= {(group, resource, v, in_pkg_ns) for v in ("list", "watch")}
    return needed


def granted(objects: list[dict[str, Any]], process: str, namespace_role: bool) -> set[tuple[str, str, str]]:
    """The process's ClusterRole grants or (namespace_role) its Roles: the stage pods' namespace and
    the bridge's Lease namespace (the release namespace, passed as NODEROLL_LEASE_NAMESPACE)."""
    kind = "Role" if namespace_role else "ClusterRole"
    out: set[tuple[str, str, str]] = set()
    for role in objects:
        if role["kind"] != kind or process not in role["metadata"]["name"]:
            continue
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    out |= {(group, resource, verb) for verb in rule["verbs"]}
    return out


def all_roles(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] in ("Role", "ClusterRole")]


@needs_helm
def test_no_wildcards_in_rbac(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for role in all_roles(rendered["default-values"]):
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[key], role["metadata"]["name"]


@needs_helm
@pytest.mark.parametrize("process", ["worker", "bridge", "webhook"])
def test_rbac_grants_every_call_of_the_code(rendered: dict[str, list[dict[str, Any]]], process: str) -> None:
    if process == "bridge" and not module_files("crd_bridge")[1:]:
        pytest.skip("crd_bridge has no modules yet")
    objects = rendered["default-values"]
    cluster = granted(objects, process, namespace_role=False)
    namespaced = granted(objects, process, namespace_role=True)
    missing = sorted(
        (g, r, v)
        for g, r, v, pkg_ns in required_rules(process)
        if (g, r, v) not in cluster and not (pkg_ns and (g, r, v) in namespaced)
    )
    assert not missing, f"{process} code calls the API without a grant in the chart: {missing}"


@needs_helm
@pytest.mark.parametrize("process", ["worker", "bridge", "webhook"])
def test_rbac_grants_nothing_the_code_does_not_call(
    rendered: dict[str, list[dict[str, Any]]], process: str
) -> None:
    if process == "bridge" and not module_files("crd_bridge")[1:]:
        pytest.skip("crd_bridge has no modules yet")
    objects = rendered["default-values"]
    needed = {(g, r, v) for g, r, v, _ in required_rules(process)}
    extra = (
        (granted(objects, process, False) | granted(objects, process, True)) - needed - GRANTED_WITHOUT_CALL
    )
    # Leader election happens through the Lease API of the bridge, checked by its own calls.
    assert not extra, f"the chart grants {process} more than its code uses: {sorted(extra)}"


@needs_helm
@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.stem)
def test_helm_lint_strict(values: Path) -> None:
    assert HELM is not None
    result = subprocess.run([HELM, "lint", "--strict", str(CHART), "--values", str(values)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_helm
def test_prometheus_address_reaches_the_worker_only(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """Helm value `prometheus.address` -> NODEROLL_PROMETHEUS_ADDRESS of the worker (the analysis gates)."""
    def env_of(objects: list[dict[str, Any]], suffix: str) -> dict[str, Any]:
        dep = next(d for d in kinds(objects)["Deployment"] if d["metadata"]["name"].endswith(suffix))
        return {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}

    assert env_of(rendered["cloud-values"], "-worker")["NODEROLL_PROMETHEUS_ADDRESS"] == (
        "http://prometheus-operated.monitoring:9090")
    assert "NODEROLL_PROMETHEUS_ADDRESS" not in env_of(rendered["cloud-values"], "-bridge")
    assert "NODEROLL_PROMETHEUS_ADDRESS" not in env_of(rendered["default-values"], "-worker")


@needs_helm
def test_cluster_name_reaches_both_processes_and_names_the_task_queue(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    """`cluster: eu-1` (ci/cluster-values.yaml): NODEROLL_CLUSTER and task queue noderoll-eu-1 (ADR 0017);
    without it neither the variable nor another task queue than `noderoll`."""
    for values, cluster, queue in (("cluster-values", "eu-1", "noderoll-eu-1"), ("default-values", None, "noderoll")):
        for process in ("worker", "bridge"):
            container = by_name(rendered[values], "Deployment", process)["spec"]["template"]["spec"]["containers"][0]
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert env.get("NODEROLL_CLUSTER") == cluster and env["NODEROLL_TASK_QUEUE"] == queue, (values, env)
