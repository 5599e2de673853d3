"""Shared pydantic base models for the CRD specs. Pure (no I/O).

Specs use camelCase aliases matching the CRD schema, accept snake_case too
(`populate_by_name`), and reject unknown fields with a message listing the valid ones, so a
typo such as `intterupt` is an error and not silently ignored.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic.alias_generators import to_camel


class SpecModel(BaseModel):
    """Base of every spec model: camelCase aliases, unknown fields rejected by name."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        use_enum_values=False,
    )

    @model_validator(mode="before")
    @classmethod
    def _reject_unknown_fields(cls, data: Any) -> Any:
        # extra="forbid" alone says "Extra inputs are not permitted"; users need the valid names.
        if isinstance(data, dict):
            allowed: set[str] = set()
            for name, info in cls.model_fields.items():
                allowed.add(name)
                if info.alias:
                    allowed.add(info.alias)
            unknown = sorted(str(k) for k in data if k not in allowed)
            if unknown:
                valid = ", ".join(sorted(info.alias or name for name, info in cls.model_fields.items()))
                raise ValueError(f"unknown field(s) {', '.join(unknown)}; valid fields are: {valid}")
        return data

    def dump(self) -> dict[str, Any]:
        """The model as CRD JSON (camelCase, None omitted)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class LenientModel(BaseModel):
    """Base of models read from objects noderoll does not own (metadata, node state): extra ignored."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")
