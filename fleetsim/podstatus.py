"""Pod status documents as a kubelet would post them: running, terminated, waiting. Pure.

Every builder returns the complete `status` (lists included), written with a JSON merge patch on
the pods/status subresource: fleetsim is the only writer of a simulated pod's status lists.
"""

from __future__ import annotations

import hashlib
from typing import Any

LOG_TAIL_LINES = 50
LOG_TAIL_BYTES = 2048


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


def running_status(pod: dict[str, Any], host_ip: str, pod_ip: str, times: tuple[str, str]) -> dict[str, Any]:
    """Running and Ready, every container started. `times` is (startTime, containers' startedAt)."""
    start_time, started = times
    uid = pod["metadata"]["uid"]
    restarts = {s["name"]: s.get("restartCount", 0) for s in pod.get("status", {}).get("containerStatuses") or []}
    statuses = [
        {
            "name": c["name"], "image": c.get("image", ""), "imageID": _image_id(c.get("image", "")),
            "containerID": container_id(uid, c["name"], restarts.get(c["name"], 0)),
            "ready": True, "started": True, "restartCount": restarts.get(c["name"], 0),
            "state": {"running": {"startedAt": started}},
        }
        for c in _containers(pod)
    ]
    return {
        "phase": "Running",
        "hostIP": host_ip,
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": start_time,
        "qosClass": pod.get("status", {}).get("qosClass", "BestEffort"),
        "conditions": [_condition(k, True, started) for k in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
        "initContainerStatuses": _init_statuses(pod, started),
        "containerStatuses": statuses,
    }


def restarted_status(pod: dict[str, Any], started: str) -> dict[str, Any]:
    """After a node reboot: every container's restartCount + 1, running again since `started`."""
    status = dict(pod.get("status") or {})
    uid = pod["metadata"]["uid"]
    statuses = []
    for old in status.get("containerStatuses") or []:
        count = int(old.get("restartCount", 0)) + 1
        statuses.append({
            **old, "restartCount": count, "ready": True, "started": True,
            "containerID": container_id(uid, old["name"], count),
            "state": {"running": {"startedAt": started}},
            "lastState": {"terminated": {"exitCode": 255, "reason": "Unknown", "finishedAt": started}},
        })
    status["containerStatuses"] = statuses
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
    status.update(
        phase=phase,
        conditions=[
            _condition("Initialized", True, started),
            _condition("Ready", False, finished, "PodCompleted"),
            _condition("ContainersReady", False, finished, "PodCompleted"),
            _condition("PodScheduled", True, started),
        ],
        containerStatuses=statuses,
    )
    status.setdefault("startTime", started)
    return status


def finished_status(pod: dict[str, Any], results: list[tuple[str, int, str]], times: tuple[str, str]) -> dict[str, Any]:
    """A pod whose containers ran in order (init containers first) with `results` = [(name, exit code,
    log tail)]: those that ran are terminated, the others never started; Succeeded only when every
    container ran and exited 0, as a kubelet reports it."""
    started, finished = times
    uid = pod["metadata"]["uid"]
    ran = {name: (code, message) for name, code, message in results}

    def one(c: dict[str, Any]) -> dict[str, Any]:
        state: dict[str, Any] = {"waiting": {"reason": "PodInitializing"}}
        if c["name"] in ran:
            code, message = ran[c["name"]]
            state = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                    "message": message, "startedAt": started, "finishedAt": finished,
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
