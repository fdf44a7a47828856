"""Run records on disk: results/<host>/<layout>/<UTC timestamp>.json, written atomically, never overwritten."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: str) -> str:
    """A path component from a host or layout name (no separators, never empty)."""
    return _UNSAFE.sub("_", text).strip("._") or "unknown"


def utc_stamp(moment: datetime | None = None) -> str:
    return (moment or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")


def save_record(record: dict[str, Any], results_dir: Path, host: str, layout: str, stamp: str | None = None) -> Path:
    """Write the record; a name already taken gets -1, -2, ... (os.link refuses to replace a file)."""
    folder = results_dir / safe_name(host) / safe_name(layout)
    folder.mkdir(parents=True, exist_ok=True)
    stamp = stamp or utc_stamp()
    with tempfile.NamedTemporaryFile("w", dir=folder, prefix=".partial-", suffix=".json", delete=False) as handle:
        json.dump(record, handle, indent=2, sort_keys=True)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
        partial = Path(handle.name)
    try:
        for attempt in range(1000):
            final = folder / (f"{stamp}.json" if attempt == 0 else f"{stamp}-{attempt}.json")
            try:
                os.link(partial, final)
                return final
            except FileExistsError:
                continue
        raise FileExistsError(f"no free name for {stamp} in {folder}")
    finally:
        partial.unlink()


def load_records(paths: Iterable[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """Run records from files and directories (searched recursively), oldest first."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(p for p in path.rglob("*.json") if not p.name.startswith(".partial-"))
        elif path.is_file():
            found.append(path)
        else:
            raise FileNotFoundError(f"no results at {path}")
    loaded = []
    for path in sorted(found):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and data.get("kind") == "sglang-benchmark-run":
            loaded.append((path, data))
    return loaded
