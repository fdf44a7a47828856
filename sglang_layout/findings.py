"""What a check says: a severity, the rule it comes from, the problem and the fix."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

Severity = Literal["error", "warning", "info"]


@dataclass(frozen=True)
class Finding:
    severity: Severity
    rule: str
    message: str
    fix: str = ""

    @classmethod
    def error(cls, rule: str, message: str, fix: str = "") -> Finding:
        return cls("error", rule, message, fix)

    @classmethod
    def warning(cls, rule: str, message: str, fix: str = "") -> Finding:
        return cls("warning", rule, message, fix)

    @classmethod
    def info(cls, rule: str, message: str, fix: str = "") -> Finding:
        return cls("info", rule, message, fix)

    def text(self) -> str:
        return f"{self.message}. Fix: {self.fix}" if self.fix else self.message

    def to_dict(self) -> dict[str, str]:
        return asdict(self)
