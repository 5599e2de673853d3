"""fleetsim's GPU verify pods (fleetsim/verify.py): the simulated GPUs pass unless a fault or no GPU says
otherwise; the `unhealthy-gpus` fault from a flag and from a faults file."""

from __future__ import annotations

from pathlib import Path

from fleetsim.context import FleetOptions, SimNode
from fleetsim.faults import Fault, Faults, load_faults_file, parse_flag
from fleetsim.verify import is_verify_pod, verdict


def node(index: int = 0) -> SimNode:
    return SimNode(f"sim-00{index}", index, boot_id="b")


def test_healthy_gpus_pass_naming_their_count() -> None:
    code, output = verdict(FleetOptions(nodes=1, gpus=[8]), node())
    assert code == 0 and "sim-000: PASS: 8 GPU(s) healthy" in output


def test_unhealthy_gpus_fail_with_the_faults_code_as_often_as_it_says() -> None:
    options = FleetOptions(nodes=2, gpus=[8], faults=Faults([Fault("unhealthy-gpus", nodes="sim-001", exit_code=4,
                                                                   times=1)]))
    assert verdict(options, node(0))[0] == 0  # another node
    code, output = verdict(options, node(1))
    assert code == 4 and "FAIL" in output and "unhealthy-gpus" in output
    assert verdict(options, node(1))[0] == 0  # spent: a retry passes


def test_a_node_without_gpu_fails_as_the_example_image_would() -> None:
    code, output = verdict(FleetOptions(nodes=2, gpus=[8, 0]), node(1))
    assert code == 1 and "no simulated GPU" in output


def test_the_fault_from_a_flag_and_a_file(tmp_path: Path) -> None:
    assert parse_flag("unhealthy-gpus", "sim-0.*:3") == Fault("unhealthy-gpus", nodes="sim-0.*", exit_code=3)
    assert parse_flag("unhealthy-gpus", "sim-001") == Fault("unhealthy-gpus", nodes="sim-001")
    path = tmp_path / "faults.yaml"
    path.write_text('faults:\n  - {kind: unhealthy-gpus, nodes: "sim-00[0-4]", exitCode: 4, times: 1}\n')
    assert load_faults_file(path) == [Fault("unhealthy-gpus", nodes="sim-00[0-4]", exit_code=4, times=1)]


def test_verify_pods_are_known_by_their_mode_label() -> None:
    assert is_verify_pod({"metadata": {"labels": {"noderoll.io/mode": "verify"}}})
    assert not is_verify_pod({"metadata": {"labels": {"noderoll.io/mode": "apply"}}})
