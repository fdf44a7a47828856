"""Imported at the start of every Python the tests' tools start on this machine (tests/rehearsal/bench.py's
tool_env puts this folder on PYTHONPATH): Ansible's modules that run here (the benchmark playbook's load
generator is localhost) keep their compiled code, as the boxes' do (tests/rehearsal/zipimport_cache.py).
Never part of a role or of the user's environment."""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("rehearsal_zipimport_cache", Path(__file__).parents[1] / "zipimport_cache.py")
if _spec is not None and _spec.loader is not None:
    _cache = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_cache)
    _cache.install()
