"""Failure types of activities (wire protocol): the `type` of every non-retryable `ApplicationError`. Pure constants.

Workflows and tests match on these strings (`err.cause.type`), never on messages. A failure that
retrying cannot fix (a missing node, an invalid spec, a bound that was exceeded) is raised as
`ApplicationError(message, type=<CONSTANT>, non_retryable=True)`; everything else stays retryable.
"""

from __future__ import annotations

from temporalio.exceptions import ApplicationError

NODE_NOT_FOUND = "NodeNotFound"
INVALID_SPEC = "InvalidSpec"
PROTECTED_PODS_TIMEOUT = "ProtectedPodsTimeout"
DRAIN_TIMEOUT = "DrainTimeout"
DRAIN_BLOCKED = "DrainBlocked"
STAGE_TIMEOUT = "StageTimeout"
INTERRUPT_TIMEOUT = "InterruptTimeout"
INTERRUPT_FAILED = "InterruptFailed"
KUBE_CLIENT_ERROR = "KubeClientError"
# Analysis gates (activities/prometheus.py): unavailable is retryable, the others are not.
PROMETHEUS_UNAVAILABLE = "PrometheusUnavailable"
PROMETHEUS_QUERY_ERROR = "PrometheusQueryError"
PROMETHEUS_RESULT_TYPE = "PrometheusResultType"
PROMETHEUS_NOT_CONFIGURED = "PrometheusNotConfigured"

NON_RETRYABLE_TYPES = (
    NODE_NOT_FOUND,
    INVALID_SPEC,
    PROTECTED_PODS_TIMEOUT,
    DRAIN_TIMEOUT,
    DRAIN_BLOCKED,
    STAGE_TIMEOUT,
    INTERRUPT_TIMEOUT,
    INTERRUPT_FAILED,
    KUBE_CLIENT_ERROR,
    PROMETHEUS_QUERY_ERROR,
    PROMETHEUS_RESULT_TYPE,
    PROMETHEUS_NOT_CONFIGURED,
)


def fatal(message: str, error_type: str, details: object | None = None) -> ApplicationError:
    """A non-retryable failure of `error_type` (one of the constants above), with optional details."""
    if details is None:
        return ApplicationError(message, type=error_type, non_retryable=True)
    return ApplicationError(message, details, type=error_type, non_retryable=True)
