"""Pod status documents as a kubelet would post them: running, restarted, terminated, waiting. Pure.

Every builder returns the complete `status` (lists included), written with a JSON merge patch on
the pods/status subresource: fleetsim is the only writer of a simulated pod's status lists. The
kubelet owns four pod conditions (`KUBELET_CONDITIONS`) and computes them afresh on every status it
posts, whatever another writer left there (the node lifecycle controller sets `Ready=False` on the
pods of a node it sees NotReady); conditions of other types (readiness gates, `DisruptionTarget`)
are kept.
"""

from __future__ import annotations

import hashlib
from typing import Any

LOG_TAIL_LINES = 50
LOG_TAIL_BYTES = 2048
KUBELET_CONDITIONS = ("Initialized", "Ready", "ContainersReady", "PodScheduled")
# What containerd reports for a container that was running when its node rebooted.
LOST_IN_REBOOT = {"exitCode": 255, "reason": "Unknown"}


def _condition(kind: str, ok: bool, now: str, reason: str = "") -> dict[str, Any]:
    cond: dict[str, Any] = {"type": kind, "status": "True" if ok else "False", "lastProbeTime": None, "lastTransitionTime": now}
    if reason:
        cond["reason"] = reason
    return cond


def container_id(pod_uid: str, name: str, restart: int) -> str:
    """A stable fake containerd id per container incarnation."""
    return "containerd://" + hashlib.sha256(f"{pod_uid}/{name}/{restart}".encode()).hexdigest()


def _image_id(image: str) -> str:
    return f"{image.split(':', 1)[0]}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def _containers(pod: dict[str, Any], key: str = "containers") -> list[dict[str, Any]]:
    return list(pod.get("spec", {}).get(key) or [])


def _init_statuses(pod: dict[str, Any], started: str) -> list[dict[str, Any]]:
    uid = pod["metadata"]["uid"]
    return [
        {
            "name": c["name"], "image": c.get("image", ""), "imageID": _image_id(c.get("image", "")),
            "containerID": container_id(uid, c["name"], 0), "ready": True, "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": started}},
        }
        for c in _containers(pod, "initContainers")
    ]


def kubelet_conditions(pod: dict[str, Any], ready: bool, now: str, reason: str = "") -> list[dict[str, Any]]:
    """The kubelet's four conditions (Ready and ContainersReady = `ready`), plus the pod's other ones.

    A condition keeps its lastTransitionTime when its status does not change, as the kubelet does.
    """
    old = {c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or []}
    wanted = {"Initialized": True, "Ready": ready, "ContainersReady": ready, "PodScheduled": True}
    conditions = []
    for kind in KUBELET_CONDITIONS:
        cond = _condition(kind, wanted[kind], now, "" if wanted[kind] else reason)
        previous = old.get(kind) or {}
        if previous.get("status") == cond["status"] and previous.get("lastTransitionTime"):
            cond["lastTransitionTime"] = previous["lastTransitionTime"]
        conditions.append(cond)
    return conditions + [c for kind, c in old.items() if kind not in KUBELET_CONDITIONS]


def is_ready(pod: dict[str, Any]) -> bool:
    """True when the pod's Ready and ContainersReady conditions are both True."""
    status = {c.get("type"): c.get("status") for c in (pod.get("status") or {}).get("conditions") or []}
    return status.get("Ready") == "True" and status.get("ContainersReady") == "True"


def running_status(pod: dict[str, Any], host_ip: str, pod_ip: str, times: tuple[str, str],
                   restarted: bool = False) -> dict[str, Any]:
    """Running and Ready, every container started. `times` is (startTime, containers' startedAt).

    `restarted`: the containers start again after a node reboot (restartCount + 1, the last run
    lost with the reboot, init containers run again in the new pod sandbox).
    """
    start_time, started = times
    uid = pod["metadata"]["uid"]
    restarts = {s["name"]: s.get("restartCount", 0) + int(restarted)
                for s in pod.get("status", {}).get("containerStatuses") or []}
    statuses = []
    for c in _containers(pod):
        count = restarts.get(c["name"], 0)
        status: dict[str, Any] = {
            "name": c["name"], "image": c.get("image", ""), "imageID": _image_id(c.get("image", "")),
            "containerID": container_id(uid, c["name"], count),
            "ready": True, "started": True, "restartCount": count,
            "state": {"running": {"startedAt": started}},
        }
        if restarted:
            status["lastState"] = {"terminated": {**LOST_IN_REBOOT, "finishedAt": started,
                                                  "containerID": container_id(uid, c["name"], count - 1)}}
        statuses.append(status)
    return {
        "phase": "Running",
        "hostIP": host_ip,
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": start_time,
        "qosClass": pod.get("status", {}).get("qosClass", "BestEffort"),
        "conditions": kubelet_conditions(pod, True, started),
        "initContainerStatuses": _init_statuses(pod, started),
        "containerStatuses": statuses,
    }


def stage_running_status(pod: dict[str, Any], host_ip: str, pod_ip: str, started: str) -> dict[str, Any]:
    """A stage pod while its containers run in order: Running, every container still to finish shown
    waiting (`PodInitializing`), so that the finished status may end each one as terminated or leave
    it waiting (the apiserver refuses a terminated container that turns waiting again)."""
    uid = pod["metadata"]["uid"]

    def waiting(c: dict[str, Any]) -> dict[str, Any]:
        return {"name": c["name"], "image": c.get("image", ""), "imageID": _image_id(c.get("image", "")),
                "containerID": container_id(uid, c["name"], 0), "ready": False, "started": False,
                "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}

    return {
        "phase": "Running", "hostIP": host_ip, "podIP": pod_ip, "podIPs": [{"ip": pod_ip}], "startTime": started,
        "qosClass": pod.get("status", {}).get("qosClass", "BestEffort"),
        "conditions": kubelet_conditions(pod, False, started, "ContainersNotReady"),
        "initContainerStatuses": [waiting(c) for c in _containers(pod, "initContainers")],
        "containerStatuses": [waiting(c) for c in _containers(pod)],
    }


def lost_in_reboot_status(pod: dict[str, Any], finished: str) -> dict[str, Any]:
    """A `restartPolicy: Never` pod whose containers were running when the node rebooted: Failed."""
    uid = pod["metadata"]["uid"]
    status = dict(pod.get("status") or {})
    statuses = []
    for old in status.get("containerStatuses") or []:
        started = ((old.get("state") or {}).get("running") or {}).get("startedAt", finished)
        statuses.append({
            **old, "ready": False, "started": False,
            "state": {"terminated": {**LOST_IN_REBOOT, "startedAt": started, "finishedAt": finished,
                                     "containerID": container_id(uid, old["name"], old.get("restartCount", 0))}},
        })
    status.update(phase="Failed", containerStatuses=statuses,
                  conditions=kubelet_conditions(pod, False, finished, "PodCompleted"))
    return status


def terminated_status(pod: dict[str, Any], exit_code: int, message: str, times: tuple[str, str]) -> dict[str, Any]:
    """Succeeded (exit 0) or Failed, with the log tail as the termination message."""
    started, finished = times
    uid = pod["metadata"]["uid"]
    phase = "Succeeded" if exit_code == 0 else "Failed"
    terminated = {
        "exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error", "message": message,
        "startedAt": started, "finishedAt": finished, "containerID": container_id(uid, "main", 0),
    }
    statuses = [
        {
            "name": c["name"], "image": c.get("image", ""), "imageID": _image_id(c.get("image", "")),
            "containerID": container_id(uid, c["name"], 0), "ready": False, "started": False, "restartCount": 0,
            "state": {"terminated": {**terminated, "containerID": container_id(uid, c["name"], 0)}},
        }
        for c in _containers(pod)
    ]
    status = dict(pod.get("status") or {})
    status.update(phase=phase, conditions=kubelet_conditions(pod, False, finished, "PodCompleted"),
                  containerStatuses=statuses)
    status.setdefault("startTime", started)
    return status


def finished_status(pod: dict[str, Any], results: list[tuple[str, int, str]], times: tuple[str, str],
                    container_times: dict[str, tuple[str, str]] | None = None) -> dict[str, Any]:
    """A pod whose containers ran in order (init containers first) with `results` = [(name, exit code,
    log tail)]: those that ran are terminated (`container_times`: each one's start and end, else the
    pod's), the others never started; Succeeded only when every container ran and exited 0, as a
    kubelet reports it."""
    started, finished = times
    each = container_times or {}
    uid = pod["metadata"]["uid"]
    ran = {name: (code, message) for name, code, message in results}

    def one(c: dict[str, Any]) -> dict[str, Any]:
        state: dict[str, Any] = {"waiting": {"reason": "PodInitializing"}}
        if c["name"] in ran:
            code, message = ran[c["name"]]
            began, ended = each.get(c["name"], (started, finished))
            state = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                    "message": message, "startedAt": began, "finishedAt": ended,
                                    "containerID": container_id(uid, c["name"], 0)}}
        return {"name": c["name"], "image": c.get("image", ""), "imageID": _image_id(c.get("image", "")),
                "containerID": container_id(uid, c["name"], 0), "ready": False, "started": False,
                "restartCount": 0, "state": state}

    everything = [*_containers(pod, "initContainers"), *_containers(pod)]
    succeeded = len(results) == len(everything) and all(code == 0 for _, code, _ in results)
    status = dict(pod.get("status") or {})
    status.update(
        phase="Succeeded" if succeeded else "Failed",
        conditions=[
            _condition("Initialized", all(c["name"] in ran for c in _containers(pod, "initContainers")), started),
            _condition("Ready", False, finished, "PodCompleted"),
            _condition("ContainersReady", False, finished, "PodCompleted"),
            _condition("PodScheduled", True, started),
        ],
        initContainerStatuses=[one(c) for c in _containers(pod, "initContainers")],
        containerStatuses=[one(c) for c in _containers(pod)],
    )
    status.setdefault("startTime", started)
    return status


def waiting_status(pod: dict[str, Any], reason: str, message: str) -> dict[str, Any]:
    """Pending with every container waiting (ErrImagePull, ContainerCreating)."""
    status = dict(pod.get("status") or {})
    status["phase"] = "Pending"
    status["containerStatuses"] = [
        {
            "name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": False, "started": False,
            "restartCount": 0, "state": {"waiting": {"reason": reason, "message": message}},
        }
        for c in _containers(pod)
    ]
    return status


def log_tail(text: str) -> str:
    """The last LOG_TAIL_LINES lines, at most LOG_TAIL_BYTES bytes (what a kubelet keeps)."""
    lines = text.rstrip("\n").splitlines()[-LOG_TAIL_LINES:]
    tail = "\n".join(lines).encode("utf-8")[-LOG_TAIL_BYTES:]
    return tail.decode("utf-8", "ignore")
