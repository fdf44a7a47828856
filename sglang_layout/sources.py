"""Reading the inputs of a preflight from files: the declaration, the model, the flag table."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sglang_layout import defaults, flags, text
from sglang_layout.drafts import parse_drafts
from sglang_layout.errors import DeclarationError
from sglang_layout.schema import Layout, ServerSettings, parse_layouts, server_settings

INDEX_NAME = "model.safetensors.index.json"
MAX_FILE_BYTES = 64 * 1024 * 1024  # config.json, an index or a flag table: far below this


@dataclass(frozen=True)
class Declaration:
    """The project's group_vars as far as preflight reads them."""

    layouts: dict[str, Layout]
    model_slug: str
    model_path: str
    port: int
    bind_address: str
    gpu_count: int | None
    gpu_memory_gib: float | None
    api_key_set: bool = False


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key written twice in one mapping (plain YAML keeps the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: let the base class say so
                duplicate = False
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark, f"found the key {key!r} twice", key_node.start_mark
                )
            seen[key] = True
        return super().construct_mapping(node, deep=deep)


def load_yaml_vars(paths: Sequence[Path]) -> dict[str, Any]:
    """Merge YAML variable files in order, like Ansible does for group_vars (later wins)."""
    merged: dict[str, Any] = {}
    for path in paths:
        try:
            data = yaml.load(_read_text(path, "--group-vars"), Loader=_UniqueKeyLoader) or {}
        except yaml.YAMLError as exc:
            raise DeclarationError(
                str(path), "(file)", f"is not valid YAML: {' '.join(str(exc).split())}", "fix the YAML"
            ) from exc
        if not isinstance(data, Mapping):
            raise DeclarationError(str(path), type(data).__name__, "a vars file must hold a mapping", "check the YAML")
        merged.update(data)
    return merged


def gpu_count(field_path: str, value: Any, *, from_text: bool = False) -> int | None:
    if value in (None, ""):
        return None
    return text.whole_number(field_path, value, low=1, high=4096, example=8, from_text=from_text)


def gpu_memory_gib(field_path: str, value: Any, *, from_text: bool = False) -> float | None:
    if value in (None, ""):
        return None
    return text.real_number(field_path, value, low=0.0, high=16384.0, example=94.97, from_text=from_text)


def flag_table_from_argument(path: Any, value: Any, what: str) -> flags.FlagTable | None:
    """The flag table an Ansible task hands over: a file on the controller, a saved table, or --help text."""
    if path:
        return read_flag_table(Path(path))
    if isinstance(value, Mapping):
        return flags.table_from_json(value)
    if isinstance(value, str) and value:
        return flag_table_from_text(value, what)
    return None


# The declaration's part of an Ansible task's arguments (an argument spec, shared by the action plugins).
DECLARATION_ARGUMENTS: dict[str, dict[str, Any]] = {
    "layouts": {"type": "dict", "required": True},
    "common_args": {"type": "dict", "default": {}},
    "common_env": {"type": "dict", "default": {}},
    "flag_table": {"type": "raw"},
    "flag_table_path": {"type": "path"},
    "model_slug": {"type": "raw", "default": defaults.MODEL_SLUG},
    "model_path": {"type": "raw", "default": defaults.MODEL_PATH},
    "port": {"type": "raw", "default": defaults.PORT},
    "bind_address": {"type": "raw", "default": defaults.BIND_ADDRESS},
    "drafts": {"type": "raw", "default": {}},
}


def declaration_from_task(
    args: Mapping[str, Any],
) -> tuple[ServerSettings, dict[str, Layout], flags.FlagTable | None]:
    """The declaration as an Ansible task hands it over (values templated as text): settings, layouts, flag table."""
    settings = server_settings(
        model_slug=args["model_slug"],
        model_path=args["model_path"],
        port=args["port"],
        bind_address=args["bind_address"],
        from_text=True,
    )
    table = flag_table_from_argument(args.get("flag_table_path"), args.get("flag_table"), "the host's recorded flag table")
    layouts = parse_layouts(
        args["layouts"],
        common_args=args.get("common_args"),
        common_env=args.get("common_env"),
        flag_table=table,
        drafts=parse_drafts(args.get("drafts")),
    )
    return settings, layouts, table


def declaration_from_vars(variables: Mapping[str, Any], flag_table: flags.FlagTable | None = None) -> Declaration:
    settings = server_settings(
        model_slug=variables.get("sglang_model_slug", defaults.MODEL_SLUG),
        model_path=variables.get("sglang_model_path", defaults.MODEL_PATH),
        port=variables.get("sglang_port", defaults.PORT),
        bind_address=variables.get("sglang_bind_address", defaults.BIND_ADDRESS),
    )
    layouts = parse_layouts(
        variables.get("sglang_layouts"),
        common_args=variables.get("sglang_common_args"),
        common_env=variables.get("sglang_common_env"),
        flag_table=flag_table,
        drafts=parse_drafts(variables.get("sglang_draft_models")),
    )
    return Declaration(
        layouts=layouts,
        model_slug=settings.model_slug,
        model_path=settings.model_path,
        port=settings.port,
        bind_address=settings.bind_address,
        gpu_count=gpu_count("sglang_gpu_count", variables.get("sglang_gpu_count")),
        gpu_memory_gib=gpu_memory_gib("sglang_gpu_memory_gib", variables.get("sglang_gpu_memory_gib")),
        api_key_set=bool(variables.get("sglang_api_key")),
    )


def _read_text(path: Path, what: str) -> str:
    """A file's text, or DeclarationError naming the file and what is wrong with it."""
    fix = "give the path of an existing, readable file"
    try:
        if path.is_dir():
            raise DeclarationError(what, str(path), "is a directory", fix)
        if path.stat().st_size > MAX_FILE_BYTES:
            raise DeclarationError(what, str(path), f"is larger than {MAX_FILE_BYTES // 2**20} MiB", "check the file")
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise DeclarationError(what, str(path), "file not found", fix) from exc
    except UnicodeDecodeError as exc:
        raise DeclarationError(what, str(path), "is not UTF-8 text", "check the file") from exc
    except OSError as exc:
        raise DeclarationError(what, str(path), f"cannot be read ({exc.strerror or exc})", fix) from exc


def read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(_read_text(path, what))
    except (json.JSONDecodeError, RecursionError) as exc:
        raise DeclarationError(what, str(path), f"is not valid JSON ({exc})", "check the file") from exc
    if not isinstance(data, dict):
        raise DeclarationError(what, str(path), "must hold a JSON object", "check the file")
    return data


def read_model(config_path: Path) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """config.json and, when it sits beside it, model.safetensors.index.json."""
    config = read_json(config_path, "model_config_path")
    index_path = config_path.parent / INDEX_NAME
    index = read_json(index_path, "model index") if index_path.is_file() else None
    return config, index


def read_flag_table(path: Path) -> flags.FlagTable:
    return flag_table_from_text(_read_text(path, "flag_table_path"), str(path))


def flag_table_from_text(raw: str, source: str = "flag table", version: str = "unknown") -> flags.FlagTable:
    """A flag table from its JSON form or --help text, or DeclarationError saying what is wrong."""
    try:
        return flags.load_table(raw, version)
    except (ValueError, RecursionError) as exc:
        raise DeclarationError(
            "flag_table_path", source, str(exc)[:300], "give a saved flag table (JSON) or --help text"
        ) from exc
