"""Flags the project renders itself, and what argparse would make of a declared flag name.

SGLang's launcher is argparse with abbreviations on: `--hos` is `--host` and `--tp`
is `--tp-size`. A declared arg is therefore resolved the way argparse resolves
it (exact name, alias or unique prefix) before it is compared with the reserved
flags; otherwise `args: {hos: 0.0.0.0}` would quietly open the server to the
network.
"""

from __future__ import annotations

from sglang_layout import flags
from sglang_layout.secrets import SECRET_FIELDS

# Canonical reserved flag -> the declaration field that renders it (its first word; the rest says how).
RESERVED = {
    "tp-size": "tp",
    "ep-size": "ep",
    "pp-size": "pp",
    "dp-size": "dp",
    "model-path": "sglang_model_path",
    "port": "sglang_port",
    "host": "sglang_bind_address",
    **{flag: f"{field} (keep it in Ansible Vault)" for field, (flag, _) in SECRET_FIELDS.items()},
    "config": "",  # the project passes the secrets file with --config: no field sets it
    "nnodes": "nnodes",
    "node-rank": "nodes (ranks follow the group's inventory order)",
    "dist-init-addr": "nodes and sglang_dist_init_port (rank 0's address and that port)",
}


def fix_for(meaning: str) -> str:
    """What to do instead of declaring the reserved flag `--meaning` in args."""
    owner = RESERVED[meaning]
    if not owner:
        return "remove it from args: the project passes --config itself (secrets go in sglang_api_key and the like, in Vault)"
    return f"remove it from args and set `{owner.split(' ')[0]}` instead"


# Every spelling SGLang 0.5.23 accepts for them (aliases), to their canonical name.
SPELLINGS = {
    **{name: name for name in RESERVED},
    "tensor-parallel-size": "tp-size",
    "expert-parallel-size": "ep-size",
    "ep": "ep-size",
    "pipeline-parallel-size": "pp-size",
    "data-parallel-size": "dp-size",
    "model": "model-path",
    "nccl-init-addr": "dist-init-addr",
}
# Real 0.5.23 flags that are also prefixes of a reserved spelling: argparse takes an exact name first.
NOT_ABBREVIATIONS = frozenset({"ssl-keyfile"})
# The flags whose values are secrets: never on a command line, in a unit, an output or a result.
SECRET_FLAGS = tuple(flag for flag, _ in SECRET_FIELDS.values())


def reserved_meaning(name: str, table: flags.FlagTable | None = None) -> str | None:
    """The reserved flag that `--name` reaches in argparse, or None.

    With the installed SGLang's flag table this is exact (aliases and unique prefixes as argparse
    resolves them). Without it, any prefix of a reserved spelling counts: it might be one.
    """
    if table is not None:
        spec, _ = flags.resolve(table, f"--{name}")
        if spec is None:
            return SPELLINGS.get(name)  # unknown or ambiguous: argparse refuses it; the flag check says so
        for spelling in spec.names:
            canonical = SPELLINGS.get(spelling.removeprefix("--"))
            if canonical:
                return canonical
        return None
    if name in SPELLINGS:
        return SPELLINGS[name]
    if name in NOT_ABBREVIATIONS:
        return None
    return next((canonical for spelling, canonical in SPELLINGS.items() if spelling.startswith(name)), None)
