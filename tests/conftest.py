"""Shared fixtures: the repository's own declaration and the Kimi K2.6-like model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglang_layout import flags
from sglang_layout.sources import declaration_from_vars, load_yaml_vars

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
KIMI_CONFIG = REPO / "examples" / "models" / "kimi-k2.6" / "config.json"
FLAGS_0_5_23 = DATA / "sglang-0.5.23-flags.json"


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def kimi_config() -> dict:
    return json.loads(KIMI_CONFIG.read_text())


@pytest.fixture(scope="session")
def flag_table() -> flags.FlagTable:
    return flags.load_table(FLAGS_0_5_23.read_text())


@pytest.fixture(scope="session")
def declared_vars() -> dict:
    return load_yaml_vars([REPO / "group_vars" / "sglang_servers.yml"])


@pytest.fixture(scope="session")
def declaration(declared_vars):
    return declaration_from_vars(declared_vars)
