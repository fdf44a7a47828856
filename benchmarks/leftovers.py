"""The controller's temporary folders of a sweep, named after the process that made them, so that a later
run removes those a SIGKILL left behind (they may hold the API key: the playbook's variables, Locust's key file)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

RUNNER = "runner"  # ansible-runner's private data dir (the playbook's variables)
WORK = "work"  # the load generator's working directory, when it is this machine (Locust's key file)
GPU = "gpu"  # the server host's samples (named here, made there)
_NAME = re.compile(r"sglang-bench-(?:runner|work|gpu)-(\d+)-")


def prefix(kind: str, pid: int | None = None) -> str:
    """`sglang-bench-<kind>-<pid>-`: the folder's owner is in its name."""
    return f"sglang-bench-{kind}-{os.getpid() if pid is None else pid}-"


def owner(name: str) -> int | None:
    """The process id in a folder's name, or None for a name not ours."""
    found = _NAME.match(name)
    return int(found.group(1)) if found else None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def remove_stale(folders: tuple[Path, ...] | None = None) -> list[Path]:
    """Remove our folders whose process is gone (in the temporary folder and /tmp); the ones removed."""
    removed = []
    for folder in folders or tuple({Path(tempfile.gettempdir()), Path("/tmp")}):
        try:
            candidates = list(folder.iterdir())
        except OSError:
            continue
        for path in candidates:
            pid = owner(path.name)
            if pid is None or alive(pid) or path.is_symlink() or not path.is_dir():
                continue
            if path.stat().st_uid != os.geteuid():
                continue  # another user's: not ours to remove
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
