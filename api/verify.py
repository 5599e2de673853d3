"""`spec.verify` of a DeploymentPolicy: the GPUs verified healthy before a node goes back to work. Pure.

    verify:
      image: registry.example/noderoll/gpu-verify:1.0.0   # deploy/examples/verify/gpu-health
      timeoutSeconds: 600                                 # default 600
      onFailure: KeepCordoned                             # or Uncordon; default KeepCordoned

When it runs: once per node window, after the window's merged interrupt succeeded and every
Package's post-interrupt stage and check passed, before the uncordon. A window without an interrupt
(config files only, nothing restarted) and a window in which a Package failed run no verify: the
first changed nothing the GPUs run with, the second has failed already. A window of a node whose
last verify failed (below) runs it again whatever its interrupt.

The verify pod: a bare pod pinned to the node like the stage pods (namespace `noderoll-system`,
labels `noderoll.io/component=stage`, `noderoll.io/mode=verify`, `noderoll.io/node` and
`noderoll.io/package` of the window's first Package; the stage pods' tolerations, pull secrets,
priority class and host network), one privileged container `verify` running `image` with its own
entry point, the host's root at `/host`, `hostPID`, and `NODEROLL_NODE`, `NODEROLL_ROOT=/host`,
`NODEROLL_MODE=verify`. Exit 0 passes. `activeDeadlineSeconds` is `timeoutSeconds`.

A failure (a non-zero exit, the deadline, a pod that cannot start: an image that cannot be pulled)
is a failed window: every Package of the window is answered `erroring` at stage `verify` with the
pod's log tail, so the node counts as failed for `batchThreshold`, `failureThreshold` and the
canary (`canary.onFailure: rollback` rolls the canary back). The Packages did complete on the host
and their entries in `noderoll.io/state` say so (`complete`); the failure is recorded next to them
(`verifyFailed`: the Packages, the message, the image), the node is labelled
`noderoll.io/status=verify-failed`, its condition `noderoll.io/Erroring` is True with the message,
and a Warning Event `VerifyFailed` says what failed. `onFailure: KeepCordoned` (the default) leaves
noderoll's own cordon on the node (a cordon someone else set is never lifted anyway); `Uncordon`
lifts it. The failed verify pod is kept for `noderoll logs` until the node's next window.

`retry` (or `noderoll retry`) runs the window again: its Packages' install sequence again, the
interrupt, then the verify; a pass clears `verifyFailed`, lifts the cordon and answers the Packages
complete. While `verifyFailed` stands, the node's Packages count as having work (the fleet lists the
node pending), and a window whose request carries no verify (the policy's `verify` removed) leaves
the record and noderoll's cordon as they are: a node whose GPUs failed goes back to work only after a
verify passed or an operator uncordoned it (`noderoll node reset` forgets the record).

Checked here: `image` is an image reference, `timeoutSeconds` 1-86400, `onFailure` one of the two
values. The rules of when a verify runs and what its outcome does are `planning/node/verify.py`; the pod
is `activities/verify_pod.py`. An example image: `deploy/examples/verify/gpu-health` (DCGM's
`dcgmi diag -r 1` where `dcgmi` exists, `nvidia-smi` otherwise).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, field_validator

from api.base import SpecModel
from api.package import check_image

VERIFY_DEFAULT_SECONDS = 600
VERIFY_MAX_SECONDS = 24 * 3600


class VerifyFailure(StrEnum):
    """What a failed verify does to the node's cordon (`spec.verify.onFailure`)."""

    # noderoll's own cordon stays: the node takes no new work until a verify passes or an operator acts.
    KEEP_CORDONED = "KeepCordoned"
    # noderoll's own cordon is lifted; the window still counts as failed.
    UNCORDON = "Uncordon"


class VerifySpec(SpecModel):
    """`spec.verify`: the image of the verify pod, its deadline, and what a failure does to the cordon."""

    image: str
    timeout_seconds: int = Field(default=VERIFY_DEFAULT_SECONDS, ge=1, le=VERIFY_MAX_SECONDS)
    on_failure: VerifyFailure = VerifyFailure.KEEP_CORDONED

    _image = field_validator("image")(check_image)
