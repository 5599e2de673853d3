"""Package fields for stage pods (issue 15): agentImage, imagePullSecrets, and the reserved config keys."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from api.package import PackageSpec


def spec(**fields: Any) -> PackageSpec:
    return PackageSpec.model_validate({"version": "1.0.0", "image": "ghcr.io/x/pkg:1.0.0", **fields})


def test_agent_image_and_pull_secrets_are_optional() -> None:
    plain = spec()
    assert plain.agent_image is None and plain.image_pull_secrets == []
    given = spec(agentImage="mirror.local/noderoll-agent:0.1.0", imagePullSecrets=[{"name": "corp-registry"}])
    assert given.agent_image == "mirror.local/noderoll-agent:0.1.0"
    assert [s.name for s in given.image_pull_secrets] == ["corp-registry"]
    assert given.dump()["imagePullSecrets"] == [{"name": "corp-registry"}]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        pytest.param({"agentImage": "not an image"}, "is not an image reference", id="agent-image"),
        pytest.param({"imagePullSecrets": [{"name": "Corp_Registry"}]}, "is not a Secret name", id="secret-name"),
        pytest.param({"imagePullSecrets": ["corp"]}, "", id="secret-as-string"),
        pytest.param({"config": {"noderoll.node-metadata.labels.json": "{}"}}, "is reserved", id="reserved-config-key"),
    ],
)
def test_invalid_values_are_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as err:
        spec(**fields)
    assert message in str(err.value)
