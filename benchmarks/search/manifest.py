"""The search manifest: results/<host>/searches/<id>.json, rewritten atomically after every candidate.

The id is a hash of the host, the candidates' declaration hashes and the workload, so running the same
search again finds its manifest and resumes it; candidates already finished are not launched again.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import results
from sglang_layout import secrets

KIND = "sglang-layout-search"
# Finished: a resumed search keeps these. Anything else (pending, running, interrupted) runs again.
FINISHED = frozenset({"measured", "failed_to_start", "failed_requests"})


def search_id(host: str, candidate_hashes: list[str], workload: dict[str, Any]) -> str:
    text = json.dumps({"host": host, "candidates": candidate_hashes, "workload": workload}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def path_for(results_dir: Path, host: str, identifier: str) -> Path:
    return results_dir / results.safe_name(host) / "searches" / f"{results.safe_name(identifier)}.json"


def load(path: Path) -> dict[str, Any] | None:
    """The stored manifest, or None when there is none; a file that is not one is an error naming it."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable search manifest ({exc}); move it away to start this search anew") from exc
    if not isinstance(data, dict) or data.get("kind") != KIND or not isinstance(data.get("candidates"), list):
        raise ValueError(f"{path}: not a search manifest; move it away to start this search anew")
    return data


def save(manifest: dict[str, Any], path: Path) -> Path:
    """Write the whole manifest to a temporary file beside it, then rename it over the old one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    manifest["updated"] = results.utc_stamp()
    descriptor, partial = tempfile.mkstemp(dir=path.parent, prefix=".partial-", suffix=".json")
    try:
        with os.fdopen(descriptor, "w") as handle:
            json.dump(secrets.redact(manifest), handle, indent=2, sort_keys=True)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, path)
    except BaseException:  # a full disk: the last good manifest stays, and no partial file beside it
        Path(partial).unlink(missing_ok=True)
        raise
    return path


def kept(previous: dict[str, Any] | None, name: str, declaration_hash: str) -> dict[str, Any] | None:
    """A finished entry of an earlier run of this search for the same candidate and declaration, if any.

    A measured entry counts only while its run record is still on disk.
    """
    for entry in (previous or {}).get("candidates", []):
        if entry.get("name") != name or entry.get("hash") != declaration_hash or entry.get("status") not in FINISHED:
            continue
        if entry["status"] == "measured" and not Path(entry.get("record") or "/nonexistent").is_file():
            return None
        return entry
    return None


def earlier_durations(results_dir: Path, host: str) -> list[float]:
    """How long each candidate took in every search stored for this host (for a first estimate)."""
    found = []
    for path in sorted((results_dir / results.safe_name(host) / "searches").glob("*.json")):
        try:
            data = load(path) or {}
        except ValueError:
            continue
        measured = [e for e in data.get("candidates", []) if e.get("status") == "measured" and e.get("duration_s")]
        found += [float(e["duration_s"]) for e in measured]
    return found
