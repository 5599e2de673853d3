"""Fake node-window activities for the time-skipping tier, registered under the real names.

`FakeNode` keeps a tiny in-memory node (unschedulable, cordoned-by, boot id, state annotation)
and records every activity call, so tests assert on the sequence the workflow produced. Exit
codes per mode are scripted (`exits["apply"] = [1, 1, 0]`: two failures, then success).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity

from activities.pod_create import pod_name
from protocol import errors
from protocol.activities import MarkBlockedNodesInput, MarkBlockedNodesResult
from protocol.activity_refs import (
    ANNOUNCE_EVICTION,
    CLOSE_WINDOW,
    CORDON_NODE,
    DELETE_STAGE_JOBS,
    DRAIN_NODE,
    MARK_BLOCKED_NODES,
    READ_NODE,
    RUN_INTERRUPT,
    RUN_STAGE_POD,
    RUN_VERIFY_POD,
    UNCORDON_NODE,
    WAIT_PROTECTED_PODS,
    WRITE_NODE_STATE,
)
from protocol.node_activities import (
    AnnounceEvictionInput,
    AnnounceEvictionResult,
    CloseWindowInput,
    CloseWindowResult,
    CordonNodeResult,
    DeleteStageJobsInput,
    DeleteStageJobsResult,
    DrainNodeInput,
    DrainNodeResult,
    NextPod,
    NodeInput,
    PrestartedPod,
    ReadNodeResult,
    RunInterruptInput,
    RunInterruptResult,
    RunStagePodInput,
    RunStagePodResult,
    RunVerifyPodInput,
    RunVerifyPodResult,
    StageJob,
    UncordonNodeResult,
    WaitProtectedPodsInput,
    WaitProtectedPodsResult,
    WriteNodeStateInput,
)


@dataclass
class FakeNode:
    """In-memory stand-in for one Node and the stage pods run on it."""

    name: str
    unschedulable: bool = False
    cordoned_by: str = ""
    boot_id: str = "boot-1"
    state_annotation: str = ""
    status_label: str = ""
    exits: dict[str, list[int]] = field(default_factory=dict)
    calls: list[tuple[str, Any]] = field(default_factory=list)
    jobs: list[str] = field(default_factory=list)
    writes: list[WriteNodeStateInput] = field(default_factory=list)
    # When set, drain_node fails with this non-retryable error type (e.g. errors.DRAIN_TIMEOUT).
    drain_error: str = ""
    # The pods `announce_eviction` finds to tell (namespace/name); their time is the notice's end.
    notice_pods: list[str] = field(default_factory=list)
    # When set, the stage pod of this mode finds the node deleted (NodeNotFound).
    deleted_at: str = ""
    ran: list[str] = field(default_factory=list)
    # `delete_stage_jobs` calls: (packages, kept pod names).
    cleanups: list[tuple[list[str], list[str]]] = field(default_factory=list)
    # Activity name -> how many of its next calls find the API unreachable (a retryable error).
    outage: dict[str, int] = field(default_factory=dict)
    # Pods created ahead by the activity before theirs (`then`, ADR 0022), and those handed to the
    # activity that runs them (`prestarted`, when it names that very pod).
    prestarted: list[str] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)

    def _prestart(self, then: NextPod | None) -> PrestartedPod | None:
        if then is None:
            return None
        name = pod_name(then.job, then.following)
        self.prestarted.append(name)
        return PrestartedPod(name, uid=f"uid-{name}", resource_version="1")

    def _adopt(self, prestarted: PrestartedPod | None, name: str) -> None:
        if prestarted is not None:
            assert prestarted.name == name, f"handed {prestarted.name} to run {name}"
            self.adopted.append(name)

    def names(self) -> list[str]:
        """The activity names called, in order."""
        return [name for name, _ in self.calls]

    def stage_jobs(self) -> list[StageJob]:
        """Every stage pod the window asked for (stage pods and interrupt pods), in order."""
        jobs = [arg for name, arg in self.calls if name in ("run_stage_pod", "run_interrupt")]
        return [getattr(job, "job", job) for job in jobs]

    def pods(self) -> list[list[StageJob]]:
        """Every stage and interrupt pod, as the Packages' jobs it ran (several in a phase pod)."""
        jobs = [arg for name, arg in self.calls if name in ("run_stage_pod", "run_interrupt")]
        return [[job.job, *getattr(job, "following", [])] for job in jobs]

    def interrupts(self) -> list[StageJob]:
        """The stage pods that ran an interrupt: interrupt pods and stage pods carrying it."""
        return [job for job in self.stage_jobs() if job.interrupt is not None]

    def modes(self) -> list[str]:
        """The modes that ran (each stage, then its check) and interrupts, in order."""
        return list(self.ran)

    def _api_down(self, activity_name: str) -> None:
        if self.outage.get(activity_name, 0) > 0:
            self.outage[activity_name] -= 1
            raise RuntimeError(f"{activity_name}: HTTP 0: no answer: connection refused (apiserver restarting)")

    def _exit(self, mode: str) -> int:
        script = self.exits.get(mode)
        return script.pop(0) if script else 0

    @activity.defn(name=READ_NODE.name)
    def read_node(self, input: NodeInput) -> ReadNodeResult:
        self.calls.append(("read_node", input))
        self._api_down("read_node")
        return ReadNodeResult(name=self.name, unschedulable=self.unschedulable, cordoned_by=self.cordoned_by,
                              boot_id=self.boot_id, ready=True, state_annotation=self.state_annotation)

    @activity.defn(name=CORDON_NODE.name)
    def cordon_node(self, input: NodeInput) -> CordonNodeResult:
        self.calls.append(("cordon_node", input))
        self._api_down("cordon_node")
        if self.unschedulable:
            return CordonNodeResult(self.cordoned_by == "noderoll", True)
        self.unschedulable, self.cordoned_by = True, "noderoll"
        return CordonNodeResult(True, False)

    @activity.defn(name=UNCORDON_NODE.name)
    def uncordon_node(self, input: NodeInput) -> UncordonNodeResult:
        self.calls.append(("uncordon_node", input))
        self._api_down("uncordon_node")
        if self.cordoned_by != "noderoll":
            return UncordonNodeResult(False)
        self.unschedulable, self.cordoned_by = False, ""
        return UncordonNodeResult(True)

    @activity.defn(name=WRITE_NODE_STATE.name)
    def write_node_state(self, input: WriteNodeStateInput) -> None:
        self.calls.append(("write_node_state", input))
        self.writes.append(input)
        if input.state_annotation is not None:
            self.state_annotation = input.state_annotation
        self.status_label = input.status

    @activity.defn(name=CLOSE_WINDOW.name)
    def close_window(self, input: CloseWindowInput) -> CloseWindowResult:
        self.calls.append(("close_window", input))
        self._api_down("close_window")
        if input.uncordon and self.cordoned_by == "noderoll":
            self.unschedulable, self.cordoned_by = False, ""
        self.writes.append(input.state)
        if input.state.state_annotation is not None:
            self.state_annotation = input.state.state_annotation
        self.status_label = input.state.status
        if input.delete is not None:
            self.cleanups.append((list(input.delete.packages), list(input.delete.keep)))
        return CloseWindowResult(DeleteStageJobsResult(kept=list(input.delete.keep) if input.delete else []))

    def uncordons(self) -> int:
        """Uncordons asked for: `uncordon_node` calls and `close_window` calls that lift the cordon."""
        return sum(1 for name, arg in self.calls
                   if name == "uncordon_node" or (name == "close_window" and arg.uncordon))

    @activity.defn(name=WAIT_PROTECTED_PODS.name)
    def wait_protected_pods(self, input: WaitProtectedPodsInput) -> WaitProtectedPodsResult:
        self.calls.append(("wait_protected_pods", input))
        return WaitProtectedPodsResult(0.0)

    @activity.defn(name=ANNOUNCE_EVICTION.name)
    def announce_eviction(self, input: AnnounceEvictionInput) -> AnnounceEvictionResult:
        self.calls.append(("announce_eviction", input))
        return AnnounceEvictionResult({pod: input.notice_at for pod in self.notice_pods})

    def call(self, name: str) -> Any:
        """The input of the only call of activity `name`."""
        [found] = [arg for called, arg in self.calls if called == name]
        return found

    @activity.defn(name=DRAIN_NODE.name)
    def drain_node(self, input: DrainNodeInput) -> DrainNodeResult:
        self.calls.append(("drain_node", input))
        self._api_down("drain_node")
        if self.drain_error:
            raise errors.fatal("drain timed out; blocking pods: ns/solo; PodDisruptionBudgets: ns/solo-pdb",
                               self.drain_error)
        return DrainNodeResult(evicted=["default/workload"], next_pod=self._prestart(input.then))

    @activity.defn(name=RUN_INTERRUPT.name)
    def run_interrupt(self, input: RunInterruptInput) -> RunInterruptResult:
        self.calls.append(("run_interrupt", input))
        self._adopt(input.prestarted, pod_name(input.job))
        self.ran.append(f"interrupt:{input.job.interrupt['type'] if input.job.interrupt else ''}")
        code = self._exit("interrupt")
        if code == 0 and input.job.interrupt and input.job.interrupt["type"] == "reboot":
            self.boot_id = f"boot-{uuid.uuid4().hex[:6]}"
        return RunInterruptResult(pod_name(input.job), code, boot_id_after=self.boot_id,
                                  next_pod=self._prestart(input.then) if code == 0 else None)

    @activity.defn(name=RUN_STAGE_POD.name)
    def run_stage_pod(self, input: RunStagePodInput) -> RunStagePodResult:
        self.calls.append(("run_stage_pod", input))
        job = input.job
        name = pod_name(job, input.following)
        self.jobs.append(name)
        self._adopt(input.prestarted, name)
        parts = [job, *input.following]
        by_package: dict[str, list[str]] = {part.package: [] for part in parts}
        for part in parts:
            completed = by_package[part.package]
            for mode in [m for m in part.modes if m != "interrupt"]:
                if mode == self.deleted_at:
                    raise errors.fatal(f"node {self.name} does not exist (deleted during the window)",
                                       errors.NODE_NOT_FOUND)
                # Scripted per mode, or per "<package>:<mode>" in a pod of several Packages.
                code = self._exit(f"{part.package}:{mode}") if f"{part.package}:{mode}" in self.exits else self._exit(mode)
                self.ran.append(mode)
                if code != 0:
                    return RunStagePodResult(name, code, f"{mode} exited {code}\nlast line", mode, completed,
                                             package=part.package if input.following else "",
                                             completed_by_package=by_package if input.following else {})
                completed.append(mode)
        last = by_package[parts[-1].package]
        result = RunStagePodResult(name, 0, "", last[-1] if last else "", last,
                                   package=parts[-1].package if input.following else "",
                                   completed_by_package=by_package if input.following else {},
                                   next_pod=self._prestart(input.then) if job.interrupt is None else None)
        if job.interrupt is not None:
            self.ran.append(f"interrupt:{job.interrupt['type']}")
            result.interrupt_exit = self._exit("interrupt")
            if result.interrupt_exit == 0 and job.interrupt["type"] == "reboot":
                self.boot_id = f"boot-{uuid.uuid4().hex[:6]}"
            result.boot_id_after = self.boot_id
        return result

    @activity.defn(name=RUN_VERIFY_POD.name)
    def run_verify_pod(self, input: RunVerifyPodInput) -> RunVerifyPodResult:
        """The GPU verify: exits as `exits["verify"]` scripts (0 when not scripted); -1: no result."""
        self.calls.append(("run_verify_pod", input))
        name = pod_name(input.job)
        self.jobs.append(name)
        self._adopt(input.prestarted, name)
        self.ran.append("verify")
        code = self._exit("verify")
        return RunVerifyPodResult(name, code, "GPU 0: Fail" if code else "PASS")

    @activity.defn(name=DELETE_STAGE_JOBS.name)
    def delete_stage_jobs(self, input: DeleteStageJobsInput) -> DeleteStageJobsResult:
        self.calls.append(("delete_stage_jobs", input))
        self.cleanups.append((list(input.packages), list(input.keep)))
        return DeleteStageJobsResult(kept=list(input.keep))

    @activity.defn(name=MARK_BLOCKED_NODES.name)
    def mark_blocked_nodes(self, input: MarkBlockedNodesInput) -> MarkBlockedNodesResult:
        self.calls.append(("mark_blocked_nodes", input))
        return MarkBlockedNodesResult([m["node"] for m in input.marks])

    def activities(self) -> list[Callable[..., Any]]:
        """Every fake, for `Worker(activities=...)`."""
        return [self.read_node, self.cordon_node, self.uncordon_node, self.write_node_state, self.close_window,
                self.wait_protected_pods, self.announce_eviction, self.drain_node, self.run_interrupt,
                self.run_stage_pod, self.run_verify_pod, self.delete_stage_jobs, self.mark_blocked_nodes]
