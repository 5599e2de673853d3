"""The GPU verify pod of a node window (`spec.verify`, api/verify.py): its manifest. Pure.

A bare pod pinned to the node like the stage pods (`activities.stage_pod`, ADR 0018), and labelled
like them (`noderoll.io/component=stage`, `noderoll.io/mode=verify`, the window's first Package and
the node), so the window's cleanup deletes it with the stage pods, `noderoll logs` shows it and
fleetsim's kubelet runs it. Unlike a stage pod it runs no package and no agent: one privileged
container `verify` runs the verify image with its own entry point, the host's root at `/host`,
`hostPID` (GPU tools look at the host's processes), with `NODEROLL_NODE`, `NODEROLL_MODE=verify` and
`NODEROLL_ROOT=/host` in its environment. Its deadline (`activeDeadlineSeconds`) is the verify's
`timeoutSeconds`: the kubelet ends a verify that runs longer, and the verify fails.
"""

from __future__ import annotations

from typing import Any

from activities import stage_pod
from activities.stage_pod import HOST_ROOT, VERIFY_MODE, StagePodSettings
from protocol.node_activities import StageJob

VERIFY_CONTAINER = "verify"


def is_verify(job: StageJob) -> bool:
    """The job is a window's verify pod (pure)."""
    return job.mode == VERIFY_MODE


def pod_manifest(job: StageJob, name: str, settings: StagePodSettings) -> dict[str, Any]:
    """The verify pod (pure; module docstring)."""
    container: dict[str, Any] = {
        "name": VERIFY_CONTAINER,
        "image": job.image,
        "env": [
            {"name": "NODEROLL_NODE", "value": job.node},
            {"name": "NODEROLL_MODE", "value": VERIFY_MODE},
            {"name": "NODEROLL_ROOT", "value": HOST_ROOT},
            *job.env,
        ],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {"privileged": True},
        "volumeMounts": [{"name": "host", "mountPath": HOST_ROOT}],
    }
    spec: dict[str, Any] = {
        "nodeName": job.node,
        "restartPolicy": "Never",
        "hostPID": True,
        "tolerations": list(job.tolerations),
        "containers": [container],
        "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
        "activeDeadlineSeconds": job.timeout_seconds,
    }
    return stage_pod.pod_object([job], name, stage_pod.with_worker_settings(spec, [job], settings))
