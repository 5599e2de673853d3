"""Every workflow and activity the worker registers takes at most one dataclass/pydantic parameter,
and activity names are `verb_object` (style rules 3 and 4)."""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing
from collections.abc import Callable
from typing import Any

import pydantic
import pytest
from temporalio import activity, workflow

from worker.registry import ACTIVITIES, WORKFLOWS

VERB_OBJECT = re.compile(r"^[a-z]+(_[a-z]+)+$")


def _parameter_types(fn: Callable[..., Any]) -> list[Any]:
    hints = typing.get_type_hints(fn)
    params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
    return [hints.get(p.name) for p in params]


def _is_boundary_type(tp: Any) -> bool:
    return inspect.isclass(tp) and (dataclasses.is_dataclass(tp) or issubclass(tp, pydantic.BaseModel))


def _check(fn: Callable[..., Any], what: str) -> None:
    types = _parameter_types(fn)
    assert len(types) <= 1, f"{what} takes {len(types)} parameters; use one Input dataclass"
    for tp in types:
        assert _is_boundary_type(tp), f"{what} parameter {tp!r} is not a dataclass or pydantic model"


@pytest.mark.parametrize("cls", WORKFLOWS, ids=lambda c: c.__name__)
def test_workflow_run_and_signals_take_one_dataclass(cls: type) -> None:
    defn = workflow._Definition.must_from_class(cls)
    assert defn.run_fn is not None
    _check(defn.run_fn, f"{defn.name}.run")
    for name, signal in defn.signals.items():
        _check(signal.fn, f"{defn.name} signal {name}")


@pytest.mark.parametrize("fn", ACTIVITIES, ids=lambda f: f.__name__)
def test_activity_takes_one_dataclass_and_is_named_verb_object(fn: Callable[..., Any]) -> None:
    defn = activity._Definition.must_from_callable(fn)
    assert defn.name and VERB_OBJECT.match(defn.name), f"activity name {defn.name!r} is not verb_object"
    _check(fn, f"activity {defn.name}")


def test_activity_names_are_unique() -> None:
    names = [activity._Definition.must_from_callable(fn).name for fn in ACTIVITIES]
    assert len(names) == len(set(names))
