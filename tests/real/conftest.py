"""The real-SGLang tier: the sglang package from PyPI, installed once per machine (tests/rehearsal/real_sglang.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.rehearsal import real_sglang


@pytest.fixture(scope="session")
def real_python() -> Path:
    try:
        return real_sglang.install()
    except real_sglang.RegistryUnreachable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def real_help(real_python) -> str:
    return real_sglang.help_text(real_python)
