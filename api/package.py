"""The Package custom resource as pydantic models, with the checks a CRD schema cannot make. Pure.

Field names and shapes follow `deploy/crds/packages.noderoll.io.yaml` (camelCase aliases).
Checks made here and not by the apiserver: the object name (lowercase DNS label, at most 43
characters), semver versions (also `1.2` and `2024.7.7-test`), `dependsOn` names and versions,
`interrupt.services` only and always with `type: service`, ConfigMap-compatible `config` keys
(none starting with `noderoll.`, which the stage pod reserves), `configInterrupts` globs that match
at least one `config` key, image references in `image` and `agentImage`, `uninstall.apply` only with
`uninstall.enabled`, unique `env` names, parseable `resources` with limits not below requests.
Cross-document checks (a `dependsOn` target exists at that version, no cycles, the policy exists)
live in `api/validation.py`.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any

from pydantic import Field, field_validator, model_validator

from api import keys
from api.base import LenientModel, SpecModel
from api.enums import InterruptType
from api.names import check_name
from api.problems import InvalidDocumentError, ValidationProblem, validate_object
from api.quantity import parse_quantity
from api.selectors import LabelSelector
from api.versions import VersionError, parse_version
from protocol import names

_CONFIG_KEY_RE = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
_CONFIG_GLOB_RE = re.compile(r"^[-._a-zA-Z0-9*?]{1,253}$")
_SERVICE_RE = re.compile(r"^[A-Za-z0-9:_.@\\-]+$")
_ENV_NAME_RE = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_IMAGE_RE = re.compile(r"^[a-z0-9][a-z0-9._\-/:@]*[A-Za-z0-9_\-.]$", re.IGNORECASE)
_SECRET_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
# Keys of the stage pod's ConfigMap starting with this hold the node's metadata (activities.stage_pod).
_RESERVED_CONFIG_PREFIX = "noderoll."


def check_image(value: str) -> str:
    """Return `value` if it is an image reference, else raise ValueError saying what is valid."""
    if not _IMAGE_RE.match(value):
        raise ValueError(f"{value!r} is not an image reference; use e.g. registry.example/pkg:1.0.0")
    return value


class Interrupt(SpecModel):
    """What to do on the host after the package's stages: reboot, restart services, or nothing."""

    type: InterruptType
    services: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _services_fit_type(self) -> Interrupt:
        if self.type is InterruptType.SERVICE and not self.services:
            raise ValueError("type service needs a non-empty services list (systemd units, e.g. containerd)")
        if self.type is not InterruptType.SERVICE and self.services:
            raise ValueError(f"services is only used with type service; remove it for type {self.type.value}")
        for service in self.services:
            if not _SERVICE_RE.match(service):
                raise ValueError(f"service {service!r} is not a systemd unit name (letters, digits, ':_.@-')")
        return self


class EnvVar(SpecModel):
    """An environment variable for the package's stage containers."""

    name: str
    value: str = ""

    @field_validator("name")
    @classmethod
    def _name_valid(cls, value: str) -> str:
        if not _ENV_NAME_RE.match(value):
            raise ValueError(f"{value!r} is not a valid variable name; use letters, digits, '_', '-', '.'")
        return value


class Resources(SpecModel):
    """Requests and limits for the stage containers (Kubernetes ResourceRequirements shape)."""

    requests: dict[str, str | int] = Field(default_factory=dict)
    limits: dict[str, str | int] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _limits_cover_requests(self) -> Resources:
        for key, limit in self.limits.items():
            if key in self.requests and parse_quantity(limit) < parse_quantity(self.requests[key]):
                raise ValueError(
                    f"limits.{key} ({limit}) is below requests.{key} ({self.requests[key]}); "
                    "a limit must be at least the request"
                )
        return self

    @field_validator("requests", "limits")
    @classmethod
    def _quantities(cls, value: dict[str, str | int]) -> dict[str, str | int]:
        for quantity in value.values():
            parse_quantity(quantity)
        return value


class Toleration(SpecModel):
    """A Kubernetes toleration added to the stage pods (and used to judge node taints)."""

    key: str | None = None
    operator: str = "Equal"
    value: str | None = None
    effect: str | None = None
    toleration_seconds: int | None = None

    @model_validator(mode="after")
    def _operator_fits(self) -> Toleration:
        if self.operator not in ("Equal", "Exists"):
            raise ValueError(f"operator {self.operator!r} is invalid; use Equal or Exists")
        if self.operator == "Exists" and self.value:
            raise ValueError("operator Exists takes no value; remove value or use Equal")
        if self.effect not in (None, "", "NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise ValueError(
                f"effect {self.effect!r} is invalid; use NoSchedule, PreferNoSchedule or NoExecute"
            )
        if not self.key and self.operator != "Exists":
            raise ValueError("an empty key needs operator Exists (tolerates every taint)")
        return self


class Uninstall(SpecModel):
    """Whether the package can be uninstalled (`enabled`) and whether to do it now (`apply`)."""

    enabled: bool = False
    apply: bool = False

    @model_validator(mode="after")
    def _apply_needs_enabled(self) -> Uninstall:
        if self.apply and not self.enabled:
            raise ValueError("apply: true needs enabled: true (the package must ship uninstall steps)")
        return self


class SecretReference(SpecModel):
    """A Secret in the stage pods' namespace (`noderoll-system`), by name (core/v1 LocalObjectReference)."""

    name: str

    @field_validator("name")
    @classmethod
    def _name_valid(cls, value: str) -> str:
        if not _SECRET_NAME_RE.match(value):
            raise ValueError(f"{value!r} is not a Secret name (lowercase letters, digits, '-' and '.')")
        return value


class Drain(SpecModel):
    """How the node is drained before a disruptive interrupt."""

    timeout_seconds: int = Field(default=600, ge=1)
    grace_period_seconds: int | None = Field(default=None, ge=0)
    delete_empty_dir_data: bool = False


# The worker's bounds when a Package sets no `limits` are `protocol.node_settings.DEFAULT_*_TIMEOUT_SECONDS`
# (the worker's environment can change them there).
# Ranges of the `limits` fields: from a minute (a shorter bound only turns slow nodes erroring) to
# 30 days for protected pods (multi-day training jobs) and a day for one stage or one reboot.
LIMIT_MIN_SECONDS = 60
PROTECTED_PODS_MAX_SECONDS = 30 * 24 * 3600
STAGE_MAX_SECONDS = 24 * 3600
INTERRUPT_MAX_SECONDS = 24 * 3600


class Limits(SpecModel):
    """Bounds of the waits of this package's node windows; an unset field is the worker's default."""

    protected_pods_timeout_seconds: int | None = Field(
        default=None, ge=LIMIT_MIN_SECONDS, le=PROTECTED_PODS_MAX_SECONDS)
    stage_timeout_seconds: int | None = Field(default=None, ge=LIMIT_MIN_SECONDS, le=STAGE_MAX_SECONDS)
    interrupt_timeout_seconds: int | None = Field(default=None, ge=LIMIT_MIN_SECONDS, le=INTERRUPT_MAX_SECONDS)


class PackageSpec(SpecModel):
    """`spec` of a Package: one host change, its target nodes and how to apply it."""

    version: str
    image: str
    node_selector: LabelSelector | None = None
    depends_on: dict[str, str] = Field(default_factory=dict)
    interrupt: Interrupt | None = None
    config: dict[str, str] = Field(default_factory=dict)
    config_interrupts: dict[str, Interrupt] = Field(default_factory=dict)
    env: list[EnvVar] = Field(default_factory=list)
    resources: Resources | None = None
    pod_non_interrupt_labels: LabelSelector | None = None
    additional_tolerations: list[Toleration] = Field(default_factory=list)
    runtime_required: bool = False
    deployment_policy: str | None = None
    paused: bool = False
    uninstall: Uninstall = Field(default_factory=Uninstall)
    drain: Drain = Field(default_factory=Drain)
    limits: Limits = Field(default_factory=Limits)
    agent_image: str | None = None
    image_pull_secrets: list[SecretReference] = Field(default_factory=list)

    @field_validator("version")
    @classmethod
    def _version_valid(cls, value: str) -> str:
        try:
            parse_version(value)
        except VersionError as err:
            raise ValueError(str(err)) from err
        return value

    @field_validator("image", "agent_image")
    @classmethod
    def _image_valid(cls, value: str | None) -> str | None:
        return None if value is None else check_image(value)

    @field_validator("depends_on")
    @classmethod
    def _depends_on_valid(cls, value: dict[str, str]) -> dict[str, str]:
        for name, version in value.items():
            check_name(name, "dependency name")
            if not version:
                raise ValueError(f"dependency {name!r} has an empty version; give the exact version it needs")
            try:
                parse_version(version)
            except VersionError as err:
                raise ValueError(f"dependency {name!r}: {err}") from err
        return value

    @field_validator("config")
    @classmethod
    def _config_keys_valid(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not _CONFIG_KEY_RE.match(key):
                raise ValueError(
                    f"config key {key!r} is invalid; use letters, digits, '-', '_' and '.' (a file name)"
                )
            if key.startswith(_RESERVED_CONFIG_PREFIX):
                raise ValueError(
                    f"config key {key!r} is reserved: keys starting with {_RESERVED_CONFIG_PREFIX!r} "
                    "hold the node's metadata in the stage pod; rename the file"
                )
        return value

    @field_validator("env")
    @classmethod
    def _env_unique(cls, value: list[EnvVar]) -> list[EnvVar]:
        seen: set[str] = set()
        for var in value:
            if var.name in seen:
                raise ValueError(f"variable {var.name!r} is set twice; give each name once")
            seen.add(var.name)
        return value

    @field_validator("deployment_policy")
    @classmethod
    def _policy_name(cls, value: str | None) -> str | None:
        if value == names.DEFAULT_FLEET:
            raise ValueError(
                f"{names.DEFAULT_FLEET!r} is the built-in one-node-at-a-time policy; leave deploymentPolicy unset to use it"
            )
        return None if value is None else check_name(value, "deploymentPolicy")

    @model_validator(mode="after")
    def _config_interrupts_match(self) -> PackageSpec:
        for pattern in self.config_interrupts:
            if not _CONFIG_GLOB_RE.match(pattern):
                raise ValueError(
                    f"configInterrupts key {pattern!r} is invalid; use a config key or a glob with * or ?"
                )
            if not any(fnmatch.fnmatchcase(key, pattern) for key in self.config):
                known = ", ".join(sorted(self.config)) or "none"
                raise ValueError(
                    f"configInterrupts key {pattern!r} matches no config key; config keys are: {known}"
                )
        return self

    def uninstall_requested(self) -> bool:
        """True when the spec asks for the package's removal from its nodes."""
        return self.uninstall.enabled and self.uninstall.apply


class ObjectMeta(LenientModel):
    """The parts of `metadata` noderoll reads."""

    name: str = ""
    generation: int = 0
    uid: str = ""
    resource_version: str = ""
    # RFC 3339, as the apiserver writes it (the runtime-required taint compares it with the Node's).
    creation_timestamp: str | None = None
    annotations: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    deletion_timestamp: str | None = None
    finalizers: list[str] = Field(default_factory=list)


class Package(LenientModel):
    """A Package object: metadata plus a validated spec (status is rendered, not read, here)."""

    metadata: ObjectMeta
    spec: PackageSpec

    @property
    def name(self) -> str:
        """The Package name (metadata.name)."""
        return self.metadata.name

    @property
    def paused(self) -> bool:
        """Paused by `spec.paused` or the `noderoll.io/pause: "true"` annotation."""
        return self.spec.paused or self.metadata.annotations.get(keys.PAUSE_ANNOTATION) == "true"

    @classmethod
    def from_k8s(cls, obj: dict[str, Any]) -> Package:
        """Build from a Kubernetes object dict; raise InvalidDocumentError listing every problem."""
        package, problems = validate_object(cls, keys.PACKAGE_KIND, obj)
        name = package.metadata.name
        if name in package.spec.depends_on:
            problems.append(
                ValidationProblem(
                    keys.PACKAGE_KIND, name, f"spec.dependsOn.{name}", "a package cannot depend on itself"
                )
            )
        if problems:
            raise InvalidDocumentError(problems)
        return package
