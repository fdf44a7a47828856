"""Installed into every rehearsal box's Python (box.py), never into a role: Ansible's modules run there
from a zip of their code (AnsiballZ), and Python compiles what it imports from a zip afresh every time,
with no .pyc to keep. A box runs a few thousand modules in a test run, each compiling the same
ansible.module_utils (about 100 ms of a box's 240 ms a module here); this keeps each compiled module
in root's own cache (/root, where no other user writes: the playbooks' modules run as root), keyed by
the Python's bytecode magic number and the source's hash. What runs is what Python would have
compiled: only the file name in tracebacks is put back. Other users' Pythons compile as before.

Standard library only: it is imported by a .pth file at the start of every Python in the box.
"""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import os
import types
import zipimport

_compile_source = zipimport._compile_source  # type: ignore[attr-defined]


CACHE_DIR = "/root/.cache/zipimport-code"


def _renamed(code: types.CodeType, filename: str) -> types.CodeType:
    """The code object as if compiled from `filename` (functions and classes inside it too)."""
    consts = tuple(_renamed(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _cached_compile(pathname: str, source: bytes) -> types.CodeType:
    key = hashlib.sha256(importlib.util.MAGIC_NUMBER + source).hexdigest()
    path = os.path.join(CACHE_DIR, key)
    try:
        with open(path, "rb") as handle:
            return _renamed(marshal.load(handle), pathname)
    except (OSError, EOFError, ValueError, TypeError):
        pass
    code = _compile_source(pathname, source)
    try:
        os.makedirs(CACHE_DIR, mode=0o700, exist_ok=True)
        partial = f"{path}.{os.getpid()}"
        with open(partial, "wb") as handle:
            marshal.dump(code, handle)
        os.replace(partial, path)  # whole or not at all, for the modules running beside this one
    except OSError:
        pass
    return code


def install() -> None:
    if os.getuid() == 0:
        zipimport._compile_source = _cached_compile  # type: ignore[attr-defined]
