"""The server's secrets (API keys, the TLS key's password): checked without echoing them, written as SGLang's --config YAML.

SGLang 0.5.23 turns each `key: value` line of the --config file into `--key value`
ahead of the command line (sglang/srt/server_args_config_parser.py), so the
values never appear in /proc/PID/cmdline. A value starting with '-' would be read
as a flag there, and whitespace or control characters would not survive the
round trip, so both are refused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import yaml

# Declaration field -> SGLang flag, and the shortest value accepted.
SECRET_FIELDS = {
    "sglang_api_key": ("api-key", 16),
    "sglang_admin_api_key": ("admin-api-key", 16),
    "sglang_ssl_keyfile_password": ("ssl-keyfile-password", 1),
}
_PRINTABLE = re.compile(r"[\x21-\x7e]+")
MAX_LENGTH = 512
# scheme://user:password@ in a URL.
_USERINFO = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")
# Keys of server arguments that hold secrets, in /server_info answers and anything else stored.
# The flags above as SGLang's ServerArgs names them (api_key, ...), and the other secrets it may hold.
SECRET_KEYS = frozenset({*(flag.replace("-", "_") for flag, _ in SECRET_FIELDS.values()), "hf_token", "token", "password"})


def problems(values: Mapping[str, object]) -> list[str]:
    """What is wrong with each given secret, in words that never contain the secret itself."""
    found = []
    for field, (flag, shortest) in SECRET_FIELDS.items():
        value = values.get(field)
        if value in (None, ""):
            continue
        if not isinstance(value, str):
            found.append(f"{field} must be text (quote it; keep it in Ansible Vault)")
        elif not shortest <= len(value) <= MAX_LENGTH:
            found.append(f"{field} must be {shortest} to {MAX_LENGTH} characters long (e.g. `openssl rand -hex 32`)")
        elif not _PRINTABLE.fullmatch(value):
            found.append(f"{field} may hold only printable ASCII without spaces (e.g. `openssl rand -hex 32`)")
        elif value.startswith("-"):
            found.append(f"{field} must not start with '-': SGLang would read it as a flag (--{flag} -...)")
    return found


def config_yaml(values: Mapping[str, object]) -> str:
    """The --config file: one `flag: value` line per secret that is set (empty when none is)."""
    bad = problems(values)
    if bad:
        raise ValueError("; ".join(bad))
    chosen = {flag: str(values[field]) for field, (flag, _) in SECRET_FIELDS.items() if values.get(field)}
    return yaml.safe_dump(chosen, default_flow_style=False, sort_keys=False) if chosen else ""


def redact(value: object) -> object:
    """A copy with every secret-named key's value and every URL's user:password@ replaced (for results and logs)."""
    if isinstance(value, Mapping):
        return {
            key: "<redacted>" if str(key).lower() in SECRET_KEYS and value[key] else redact(item) for key, item in value.items()
        }
    if isinstance(value, list):
        return [redact(item) for item in value]
    if isinstance(value, str):
        return _USERINFO.sub(r"\1<redacted>@", value)
    return value
