"""AdmissionReview in, AdmissionReview out: the wire format of `admission.k8s.io`. Pure (no I/O).

The apiserver sends the first version of the webhook configuration's `admissionReviewVersions` it
speaks (Kubernetes 1.16+ send `v1`; older ones, and configurations that list only `v1beta1`, send
`v1beta1`); the answer must carry the same `apiVersion` and the request's `uid`. Both versions have
the same request and response fields. A refusal is a `metav1.Status` with code 422, reason
`Invalid`, the problems as the message (one per line, as `noderoll validate` prints them) and one
cause per problem with its field; the apiserver prefixes the message with
`admission webhook "<name>" denied the request: `.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from api.admission import AdmissionDecision, AdmissionInput

GROUP = "admission.k8s.io"
VERSIONS = (f"{GROUP}/v1", f"{GROUP}/v1beta1")
KIND = "AdmissionReview"


class ReviewError(ValueError):
    """The body is not an AdmissionReview this webhook can answer (HTTP 400)."""


@dataclass(frozen=True)
class Review:
    """The parts of an AdmissionReview request the decision needs."""

    api_version: str
    uid: str
    operation: str
    kind: str
    name: str
    obj: Any
    old: Any
    dry_run: bool


def parse_review(body: Any) -> Review:
    """The request of an AdmissionReview (v1 or v1beta1); ReviewError when it is none."""
    if not isinstance(body, Mapping) or body.get("kind") != KIND:
        raise ReviewError(f"not an {KIND}")
    api_version = body.get("apiVersion")
    if api_version not in VERSIONS:
        raise ReviewError(f"apiVersion {api_version!r} is not served; use one of {', '.join(VERSIONS)}")
    request = body.get("request")
    if not isinstance(request, Mapping) or not request.get("uid"):
        raise ReviewError("the AdmissionReview has no request with a uid")
    kind = request.get("kind") if isinstance(request.get("kind"), Mapping) else {}
    return Review(
        api_version=str(api_version),
        uid=str(request["uid"]),
        operation=str(request.get("operation") or ""),
        kind=str(kind.get("kind") or ""),
        name=str(request.get("name") or ""),
        obj=request.get("object"),
        old=request.get("oldObject"),
        dry_run=bool(request.get("dryRun")),
    )


def admission_input(review: Review, packages: Mapping[str, Mapping[str, Any]] | None,
                    unread_reason: str = "") -> AdmissionInput:
    """What `api.admission.decide` needs for this review."""
    return AdmissionInput(review.operation, review.obj, review.old, packages, unread_reason)


def response(review: Review, decision: AdmissionDecision) -> dict[str, Any]:
    """The AdmissionReview answering `review`, in its apiVersion."""
    answer: dict[str, Any] = {"uid": review.uid, "allowed": decision.allowed}
    if decision.warnings:
        answer["warnings"] = list(decision.warnings)
    if not decision.allowed:
        answer["status"] = {
            "code": 422,
            "reason": "Invalid",
            "message": decision.message,
            "details": {
                "name": review.name,
                "group": "noderoll.io",
                "kind": review.kind,
                "causes": [{"reason": "FieldValueInvalid", "field": p.field, "message": p.message}
                           for p in decision.problems],
            },
        }
    return {"apiVersion": review.api_version, "kind": KIND, "response": answer}
