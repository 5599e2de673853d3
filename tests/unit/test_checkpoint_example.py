"""The example pod that checkpoints on noderoll's eviction notice (deploy/examples/workloads/checkpoint-on-notice.yaml):
its manifest mounts what its script reads, and its script checkpoints when the annotation appears and when
SIGTERM comes. The script runs here in `sh` against temporary files standing in for the downwardAPI volume
and the checkpoint volume (the apiserver accepts the manifest: tests/integration/test_gpu_workloads.py)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import yaml

from api.keys import EVICTION_AT_ANNOTATION
from tests.helpers import assert_eventually

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "workloads" / "checkpoint-on-notice.yaml"


def manifest() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    return doc


def test_the_pod_sees_its_own_annotations_and_asks_for_a_gpu() -> None:
    spec = manifest()["spec"]["template"]["spec"]
    [container] = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    [item] = volumes["podinfo"]["downwardAPI"]["items"]
    assert item == {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["podinfo"] == "/etc/podinfo" and "/etc/podinfo/annotations" in container["command"][2]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    # Not an emptyDir: a drain refuses those without drain.deleteEmptyDirData, and they die with the pod.
    assert "persistentVolumeClaim" in volumes["checkpoints"]


def test_the_script_checkpoints_on_the_notice_and_on_sigterm(tmp_path: Path) -> None:
    script = manifest()["spec"]["template"]["spec"]["containers"][0]["command"][2]
    annotations, checkpoints = tmp_path / "annotations", tmp_path / "checkpoints"
    checkpoints.mkdir()
    annotations.write_text('kubernetes.io/psp="restricted"\n')
    env = {**os.environ, "PODINFO_ANNOTATIONS": str(annotations), "CHECKPOINT_DIR": str(checkpoints),
           "POLL_SECONDS": "0.05"}
    trainer = subprocess.Popen(["sh", "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert trainer.stdout is not None
        assert trainer.stdout.readline() == "resuming at step 0\n"
        assert not (checkpoints / "step").exists()  # no notice, no checkpoint
        # The kubelet rewrites the file when the annotations change, as `key="value"` lines.
        annotations.write_text(f'kubernetes.io/psp="restricted"\n{EVICTION_AT_ANNOTATION}="2025-03-01T10:00:00Z"\n')
        line = trainer.stdout.readline()
        assert line.startswith("eviction announced for 2025-03-01T10:00:00Z: checkpoint saved at step "), line
        saved = int((checkpoints / "step").read_text())
        assert saved == int(line.rsplit(" ", 1)[1])
        # It goes on training; the eviction's SIGTERM saves the last step and ends it cleanly.
        assert_eventually(lambda: trainer.poll() is None, timeout=1)
        trainer.send_signal(signal.SIGTERM)
        assert trainer.wait(timeout=5) == 0
        last = trainer.stdout.read()
        assert last.startswith("evicted at step "), last
        assert int((checkpoints / "step").read_text()) >= saved
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait()
    # The Job's next pod resumes from the checkpoint.
    again = subprocess.Popen(["sh", "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert again.stdout is not None
        assert again.stdout.readline() == f"resuming at step {(checkpoints / 'step').read_text().strip()}\n"
    finally:
        again.kill()
        again.wait()
