"""Inputs and results of every activity, as plain dataclasses (no Kubernetes import).

Workflows import this module (inside `imports_passed_through`) and call activities by name, so the
workflow sandbox never loads the Kubernetes client (import contract `workflows-no-io`).
Each activity owner adds its `<Verb><Noun>Input` / `...Result` classes here.
"""

from __future__ import annotations
