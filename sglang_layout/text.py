"""Checks for the strings a declaration hands to systemd, a path or a command line.

Every check is a full-string match with a length bound: a value either is
exactly what the pattern allows or it is refused, naming the field, the value
and the fix. Control characters are refused everywhere: a newline in a unit
file starts a new directive, which is how a description once became
`ExecStartPre=+...` (run as root).
"""

from __future__ import annotations

import contextlib
import ipaddress
import math
import re
import unicodedata
from typing import Any

from sglang_layout.errors import DeclarationError

# Absolute paths of plain components: no whitespace, quotes, '%', '$' or '\' (systemd and shells
# give those meaning), no '.' or '..' components (they would step outside the declared place).
_PATH = re.compile(r"(?:/[A-Za-z0-9._@+=,:~-]+)+/?")
_HOSTNAME = re.compile(r"(?=.{1,253}\Z)(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?)+")
MAX_TEXT = 4096
MAX_PATH = 1024


def _shown(value: Any) -> Any:
    """The value as an error message shows it: long values cut, so a 1 MB string is not echoed back."""
    if isinstance(value, str) and len(value) > 120:
        return value[:100] + f"...({len(value)} characters)"
    return value


def refuse(field_path: str, value: Any, problem: str, fix: str) -> DeclarationError:
    return DeclarationError(field_path, _shown(value), problem, fix)


def control_characters(text: str) -> list[str]:
    """The control and format characters in `text` (newline, NUL, ESC, BIDI overrides...), as escapes."""
    found = {char for char in text if unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp")}
    return sorted(repr(char)[1:-1] for char in found)


def printable(value: Any, max_length: int = 80) -> str:
    """Text read from a file, safe to print: control and format characters escaped (no terminal escape
    sequence or newline gets through), long text cut."""
    shown = "".join(repr(char)[1:-1] if unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp") else char for char in str(value))
    return shown if len(shown) <= max_length else shown[: max_length - 3] + "..."


def plain_text(field_path: str, value: Any, *, max_length: int = MAX_TEXT, fix: str = "quote it as one line of text") -> str:
    """A string with no control characters and a bounded length."""
    if not isinstance(value, str):
        raise refuse(field_path, value, "must be text", fix)
    if len(value) > max_length:
        raise refuse(field_path, value, f"is {len(value)} characters long, more than {max_length}", "shorten it")
    bad = control_characters(value)
    if bad:
        raise refuse(
            field_path,
            value,
            f"holds control characters ({', '.join(bad)}); they would break the unit file or the command line",
            "write it on one line, without control characters",
        )
    return value


def one_line(field_path: str, value: Any, *, max_length: int = 200) -> tuple[str, bool]:
    """Text folded to one line (runs of whitespace, newlines included, become one space); (text, was_folded)."""
    if not isinstance(value, str):
        raise refuse(field_path, value, "must be text", "quote it")
    folded = " ".join(value.split())
    checked = plain_text(field_path, folded, max_length=max_length, fix="write it on one line")
    return checked, checked != value.strip()


def matching(field_path: str, value: Any, pattern: re.Pattern[str], *, max_length: int, what: str, fix: str) -> str:
    """A string that matches `pattern` as a whole (never a prefix: 'ep8\\n' is not 'ep8')."""
    if not isinstance(value, str) or not value:
        raise refuse(field_path, value, f"must be {what}", fix)
    if len(value) > max_length:
        raise refuse(field_path, value, f"is {len(value)} characters long, more than {max_length}", fix)
    if not pattern.fullmatch(value):
        raise refuse(field_path, value, f"is not {what}", fix)
    return value


def absolute_path(field_path: str, value: Any, *, example: str) -> str:
    """An absolute path of plain components, no '.' or '..' steps."""
    text = matching(
        field_path,
        value,
        _PATH,
        max_length=MAX_PATH,
        what="an absolute path of plain names (letters, digits, . _ @ + = , : ~ -)",
        fix=f"write an absolute path such as {example}, without spaces, quotes, '%', '$' or control characters",
    )
    if any(part in (".", "..") for part in text.split("/")):
        raise refuse(field_path, value, "steps through '.' or '..'", f"write the path without them, e.g. {example}")
    return text.rstrip("/") or "/"


def bind_address(field_path: str, value: Any) -> str:
    """An IP address or a host name the server can bind to."""
    if isinstance(value, str):
        try:
            return str(ipaddress.ip_address(value))
        except ValueError:
            if _HOSTNAME.fullmatch(value):
                return value
    raise refuse(field_path, value, "is not an IP address or host name", "write e.g. 127.0.0.1 (local only) or 0.0.0.0 (all)")


def is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def whole_number(field_path: str, value: Any, *, low: int, high: int, example: int, from_text: bool = False) -> int:
    """An int within [low, high]. YAML's `'8'` and `8.0` are refused (or accepted as text when `from_text`: -e values)."""
    if from_text and isinstance(value, str) and re.fullmatch(r"\s*[0-9]{1,12}\s*", value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise refuse(field_path, value, "must be a whole number", f"write it without quotes, e.g. {example}")
    if value < low:
        raise refuse(
            field_path, value, f"must be at least {low}", f"write e.g. {example}" if low > 1 else "use 1 for 'not split'"
        )
    if value > high:
        raise refuse(field_path, value, f"must be at most {high}", f"write e.g. {example}")
    return value


def real_number(
    field_path: str, value: Any, *, low: float, high: float, example: float, low_open: bool = True, from_text: bool = False
) -> float:
    """A finite number in (low, high] (or [low, high] when not `low_open`)."""
    if from_text and isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise refuse(field_path, value, "must be a number", f"write it without quotes, e.g. {example}")
    if (value <= low if low_open else value < low) or value > high:
        interval = f"{'above' if low_open else 'at least'} {low:g} and at most {high:g}"
        raise refuse(field_path, value, f"must be {interval}", f"write e.g. {example}")
    return float(value)
