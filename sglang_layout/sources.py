"""Reading the inputs of a preflight from files: the declaration, the model, the flag table."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sglang_layout import flags
from sglang_layout.schema import DeclarationError, Layout, parse_layouts

INDEX_NAME = "model.safetensors.index.json"


@dataclass(frozen=True)
class Declaration:
    """The project's group_vars as far as preflight reads them."""

    layouts: dict[str, Layout]
    model_path: str
    port: int
    bind_address: str
    gpu_count: int | None
    gpu_memory_gib: float | None


def load_yaml_vars(paths: Sequence[Path]) -> dict[str, Any]:
    """Merge YAML variable files in order, like Ansible does for group_vars (later wins)."""
    merged: dict[str, Any] = {}
    for path in paths:
        data = yaml.safe_load(path.read_text()) or {}
        if not isinstance(data, Mapping):
            raise DeclarationError(str(path), type(data).__name__, "a vars file must hold a mapping", "check the YAML")
        merged.update(data)
    return merged


def declaration_from_vars(variables: Mapping[str, Any]) -> Declaration:
    layouts = parse_layouts(
        variables.get("sglang_layouts"),
        common_args=variables.get("sglang_common_args"),
        common_env=variables.get("sglang_common_env"),
    )
    return Declaration(
        layouts=layouts,
        model_path=str(variables.get("sglang_model_path", "/models/model")),
        port=int(variables.get("sglang_port", 30000)),
        bind_address=str(variables.get("sglang_bind_address", "0.0.0.0")),
        gpu_count=variables.get("sglang_gpu_count"),
        gpu_memory_gib=variables.get("sglang_gpu_memory_gib"),
    )


def read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise DeclarationError(what, str(path), "file not found", "give the path of an existing file") from exc
    except json.JSONDecodeError as exc:
        raise DeclarationError(what, str(path), f"is not valid JSON ({exc})", "check the file") from exc
    if not isinstance(data, dict):
        raise DeclarationError(what, str(path), "must hold a JSON object", "check the file")
    return data


def read_model(config_path: Path) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """config.json and, when it sits beside it, model.safetensors.index.json."""
    config = read_json(config_path, "model_config_path")
    index_path = config_path.parent / INDEX_NAME
    index = read_json(index_path, "model index") if index_path.exists() else None
    return config, index


def read_flag_table(path: Path) -> flags.FlagTable:
    try:
        return flags.load_table(path.read_text())
    except FileNotFoundError as exc:
        raise DeclarationError("flag_table_path", str(path), "file not found", "give a saved flag table or --help text") from exc
    except ValueError as exc:
        raise DeclarationError("flag_table_path", str(path), str(exc), "give a saved flag table (JSON) or --help text") from exc
