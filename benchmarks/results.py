"""Run records on disk: results/<host>/<layout>/<UTC timestamp>.json, written atomically, never overwritten."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sglang_layout import secrets

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
MAX_NAME = 80  # well under every file system's 255-byte limit, with room for the stamp
REPO = Path(__file__).resolve().parents[1]
# Other kinds of JSON kept under results/ (not runs, not errors): the search manifests.
OTHER_KINDS = frozenset({"sglang-layout-search"})


def project_commit() -> str:
    """The project's commit (with -dirty for local changes), stored in every record."""
    git = ["git", "-C", str(REPO), "describe", "--always", "--dirty"]
    done = subprocess.run(git, capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


def new_run_record(workload: dict[str, Any], *, endpoint: str = "", server_host: str = "") -> dict[str, Any]:
    """The start of a run's record (`run`'s and each search candidate's): what was asked, of which server, when."""
    return {
        "kind": "sglang-benchmark-run",
        "started": utc_stamp(),
        "commit": project_commit(),
        "workload": workload,
        "endpoint": endpoint,
        "server_host": server_host,
    }


def safe_name(text: str) -> str:
    """A path component from a host or layout name (no separators, never empty, bounded; long ones keep a hash)."""
    name = _UNSAFE.sub("_", text).strip("._") or "unknown"
    if len(name) > MAX_NAME:
        name = f"{name[: MAX_NAME - 13]}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    return name


def utc_stamp(moment: datetime | None = None) -> str:
    return (moment or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")


# Kernel and device file systems: a folder there holds no records (and root may "write" to some of them).
PSEUDO_FILESYSTEMS = frozenset(
    {
        "proc",
        "sysfs",
        "devtmpfs",
        "devpts",
        "cgroup",
        "cgroup2",
        "debugfs",
        "tracefs",
        "securityfs",
        "pstore",
        "bpf",
        "configfs",
        "fusectl",
        "mqueue",
        "hugetlbfs",
        "binfmt_misc",
        "efivarfs",
        "autofs",
        "nsfs",
        "selinuxfs",
        "rpc_pipefs",
    }
)


def filesystem_type(path: Path, mountinfo: str | None = None) -> str:
    """The type of the file system holding `path` (the deepest mount point above it), from /proc/self/mountinfo."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return ""
    target, best, kind = os.path.realpath(path), "", ""
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        point = fields[4].replace("\\040", " ")
        after = line.split(" - ", 1)[1].split()
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best) and after:
            best, kind = point, after[0]
    return kind


def results_dir_problem(results_dir: Path) -> str | None:
    """Why records could not be written under `results_dir` (checked before anything is measured), or None.

    It must be (or become) a folder on a real file system where a file can be written and removed."""
    where = f"--results-dir {results_dir}"
    nearest = next((p for p in [results_dir, *results_dir.parents] if p.exists()), Path("/"))
    kind = filesystem_type(nearest)
    if kind in PSEUDO_FILESYSTEMS:
        return f"{where}: is on {kind}, a kernel file system that holds no files; name a folder on a disk"
    try:
        results_dir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        return f"{where}: is a file, not a folder; name a folder"
    except OSError as exc:
        return f"{where}: cannot be created ({exc.strerror or exc}); name a folder you can write"
    if not os.access(results_dir, os.W_OK | os.X_OK):
        return f"{where}: not writable; name a folder you can write"
    try:  # the real test: a file written, synced and removed
        with tempfile.NamedTemporaryFile("w", dir=results_dir, prefix=".probe-") as probe:
            probe.write("{}\n")
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as exc:
        return f"{where}: a file cannot be written there ({exc.strerror or exc}); {write_fix(exc)}"
    return None


def write_fix(exc: OSError) -> str:
    """What to do about a failed write, by its cause."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "free some space there, or name another folder"
    if exc.errno == errno.EROFS:
        return "it is mounted read-only; name a folder you can write"
    return "name a folder you can write"


def save_record(record: dict[str, Any], results_dir: Path, host: str, layout: str, stamp: str | None = None) -> Path:
    """Write the record (secrets redacted); a name already taken gets -1, -2, ...

    The final name is claimed with an exclusive create, then the complete file is renamed over
    that claim: nothing is ever overwritten, a reader never sees half a record, and it works where
    hard links do not (vfat, some FUSE mounts).
    """
    folder = results_dir / safe_name(host) / safe_name(layout)
    folder.mkdir(parents=True, exist_ok=True)
    stamp = stamp or utc_stamp()
    with tempfile.NamedTemporaryFile("w", dir=folder, prefix=".partial-", suffix=".json", delete=False) as handle:
        partial = Path(handle.name)
        try:
            json.dump(secrets.redact(record), handle, indent=2, sort_keys=True)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        except BaseException:  # a full disk: no half-written file stays behind
            partial.unlink(missing_ok=True)
            raise
    try:
        for attempt in range(1000):
            final = folder / (f"{stamp}.json" if attempt == 0 else f"{stamp}-{attempt}.json")
            try:
                os.close(os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            except FileExistsError:
                continue
            os.replace(partial, final)
            return final
        raise FileExistsError(f"no free name for {stamp} in {folder}")
    finally:
        partial.unlink(missing_ok=True)


def load_records(paths: Iterable[Path], skipped: list[tuple[Path, str]] | None = None) -> list[tuple[Path, dict[str, Any]]]:
    """Run records from files and directories (searched recursively), oldest first.

    A file that cannot be read as a run record is left out and named in `skipped` (path, why).
    """
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
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            if skipped is not None:
                skipped.append((path, f"not readable as JSON ({exc})"))
            continue
        if isinstance(data, dict) and data.get("kind") == "sglang-benchmark-run":
            loaded.append((path, data))
        elif isinstance(data, dict) and data.get("kind") in OTHER_KINDS:
            continue
        elif skipped is not None:
            skipped.append((path, "not a benchmark run record"))
    return loaded
