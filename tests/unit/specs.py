"""One place for the unit tests' service settings: sglang_layout.unit.unit_spec with what a box would pass."""

from __future__ import annotations

from typing import Any

from sglang_layout.schema import Layout
from sglang_layout.unit import UnitSpec, unit_spec

SERVICE = {
    "model_slug": "k26",
    "model_path": "/srv/m",
    "port": 30001,
    "host": "0.0.0.0",
    "venv": "/opt/sglang/venv-0.5.23",
    "python_version": "3.12",
    "cuda_home": "/usr/local/cuda-13.0",
}


def spec(layout: Layout, **overrides: Any) -> UnitSpec:
    """The unit of `layout` with the usual settings, any of them (or unit_spec's other arguments) overridden."""
    return unit_spec(layout, **{**SERVICE, **overrides})
