"""The one error a declaration can raise: it names the field, the value and the fix."""

from __future__ import annotations

from typing import Any


class DeclarationError(ValueError):
    """A declaration is malformed: names the field, the value and the fix (the CLI exits 2 on it)."""

    def __init__(self, field_path: str, value: Any, problem: str, fix: str) -> None:
        self.field_path = field_path
        self.value = value
        self.problem = problem
        self.fix = fix
        super().__init__(f"{field_path} = {value!r}: {problem}. Fix: {fix}")
