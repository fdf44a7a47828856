"""`python -m sglang_layout`: preflight layouts from the command line, and parse --help into a flag table."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from sglang_layout import report
from sglang_layout.command import SECRETS_FILE_IN_UNIT
from sglang_layout.model_size import ModelConfigError
from sglang_layout.preflight import Facts, check_all
from sglang_layout.schema import DeclarationError, select_layout
from sglang_layout.sources import (
    declaration_from_vars,
    flag_table_from_text,
    gpu_count,
    gpu_memory_gib,
    load_yaml_vars,
    read_flag_table,
    read_model,
)

DEFAULT_GROUP_VARS = Path("group_vars/sglang_servers.yml")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sglang_layout", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    pre = sub.add_parser("preflight", help="check layouts before launching them")
    pre.add_argument(
        "--group-vars", type=Path, action="append", help=f"YAML vars file(s) with sglang_layouts (default {DEFAULT_GROUP_VARS})"
    )
    pre.add_argument("--layout", help="the layout to decide on (exit 1 when rejected); all are tabled either way")
    pre.add_argument("--gpu-count", help="GPUs on the host (default: sglang_gpu_count)")
    pre.add_argument("--gpu-memory-gib", help="memory per GPU in GiB (default: sglang_gpu_memory_gib)")
    pre.add_argument("--model-config", type=Path, help="the model's config.json (an index.json beside it is used)")
    pre.add_argument("--flag-table", type=Path, help="the installed SGLang's flag table (JSON) or its --help text")
    pre.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    table = sub.add_parser("flag-table", help="parse `launch_server --help` text (stdin) into a JSON flag table")
    table.add_argument("--version", default="unknown", help="the SGLang version the help came from")
    return parser


def _preflight(args: argparse.Namespace) -> int:
    started = time.monotonic()
    table = read_flag_table(args.flag_table) if args.flag_table else None
    declaration = declaration_from_vars(load_yaml_vars(args.group_vars or [DEFAULT_GROUP_VARS]), flag_table=table)
    config, index = read_model(args.model_config) if args.model_config else (None, None)
    count = gpu_count("--gpu-count", args.gpu_count, from_text=True)
    memory = gpu_memory_gib("--gpu-memory-gib", args.gpu_memory_gib, from_text=True)
    facts = Facts(
        gpu_count=count if count is not None else declaration.gpu_count,
        gpu_memory_gib=memory if memory is not None else declaration.gpu_memory_gib,
        model_config=config,
        model_index=index,
        flag_table=table,
        model_path=declaration.model_path,
        port=declaration.port,
        host=declaration.bind_address,
        api_key_set=declaration.api_key_set,
        secrets_file=SECRETS_FILE_IN_UNIT if declaration.api_key_set else None,
    )
    chosen = select_layout(declaration.layouts, args.layout) if args.layout else None
    verdicts = check_all(declaration.layouts, facts)
    if args.json:
        print(json.dumps([v.to_dict() for v in verdicts], indent=2))
    else:
        print(report.format_report(verdicts))
        print(f"\npreflight of {len(verdicts)} layouts took {time.monotonic() - started:.2f} s")
    if chosen is None:
        return 0
    verdict = next(v for v in verdicts if v.layout.name == chosen.name)
    if verdict.ok:
        print(f"\n{chosen.name}: ok", file=sys.stderr)
        return 0
    print(f"\n{chosen.name}: {verdict.summary()}", file=sys.stderr)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "flag-table":
            print(json.dumps(flag_table_from_text(sys.stdin.read(), "stdin", args.version).to_json(), indent=1))
            return 0
        return _preflight(args)
    except (DeclarationError, ModelConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
