"""kube-apiserver request counts from the apiserver's own `/metrics` (`apiserver_request_total`).

`parse_request_totals` is pure (Prometheus text -> counts by verb and resource); `scrape` does one
HTTPS GET with the kubeconfig's client certificate. The benchmark takes a scrape before and after
a rollout and divides the delta by the number of node windows. The apiserver counts every client
(noderoll's worker and bridge, fleetsim's simulated kubelets, the controller manager, the
scheduler); `bench/reqcount.py` counts noderoll's own share in its processes.
"""

from __future__ import annotations

import re
from collections import Counter

from kubernetes import config

METRIC = "apiserver_request_total"
_LINE = re.compile(r"^" + METRIC + r"\{(?P<labels>[^}]*)\}\s+(?P<value>[0-9.eE+-]+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
# Long-running requests (watches) count once each, like any other request.
Key = tuple[str, str]


def parse_request_totals(text: str) -> Counter[Key]:
    """Sum `apiserver_request_total` over codes and versions, by (verb, resource[/subresource]). Pure."""
    totals: Counter[Key] = Counter()
    for line in text.splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        labels = dict(_LABEL.findall(match.group("labels")))
        resource = labels.get("resource", "")
        if labels.get("subresource"):
            resource = f"{resource}/{labels['subresource']}"
        totals[(labels.get("verb", ""), resource)] += int(float(match.group("value")))
    return totals


def delta(before: Counter[Key], after: Counter[Key]) -> Counter[Key]:
    """Requests made between two scrapes (counters only grow; a restart would show as negative). Pure."""
    result: Counter[Key] = Counter()
    for key, value in after.items():
        diff = value - before.get(key, 0)
        if diff > 0:
            result[key] = diff
    return result


def created(counts: Counter[Key]) -> Counter[Key]:
    """The creations among `counts`: POSTs (the apiserver's verb for a create) of a resource itself,
    not of a subresource (an eviction or a binding creates no object). Pure."""
    return Counter({key: n for key, n in counts.items() if key[0] == "POST" and "/" not in key[1]})


def per_window(counts: Counter[Key], windows: int) -> dict[str, float]:
    """`{"VERB resource": requests per window}`, largest first. Pure."""
    windows = max(1, windows)
    return {f"{verb} {resource}": round(n / windows, 2) for (verb, resource), n in counts.most_common()}


def scrape(kubeconfig: str) -> Counter[Key]:
    """Read the apiserver's `/metrics` as the kubeconfig's user (the local stack's admin)."""
    api = config.new_client_from_config(config_file=kubeconfig)
    try:
        request = api.param_serialize("GET", "/metrics", header_params={"Accept": "text/plain"},
                                      auth_settings=["BearerToken"])
        response = api.call_api(*request)
        response.read()
        text = response.data.decode("utf-8", "replace")
    finally:
        api.close()
    return parse_request_totals(text)
