"""Start SGLang's router in this process, with its API key from the unit's credential.

    python sglang_router_launch.py MODULE ROUTER-ARGS...

MODULE is `smg.launch_router` or `sglang_router.launch_router`; both packages offer
`launch_router(parse_router_args(argv))`, which runs the router in this process. When systemd
hands the unit the secrets file (LoadCredential=sglang-secrets.yaml:..., the servers' format,
`api-key: KEY`), the key is added as `--api-key` to the argument list given to that function,
so it is never on a command line (/proc/PID/cmdline), in the unit or in the environment.
Standard library only: it runs under the router's own virtualenv.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

CREDENTIAL = "sglang-secrets.yaml"
MODULES = ("smg.launch_router", "sglang_router.launch_router")


def api_key(secrets_text: str) -> str:
    """The `api-key` value of the secrets file (PyYAML's safe_dump of plain or single-quoted strings), or ''."""
    for line in secrets_text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() != "api-key":
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1].replace("''", "'")
        return value
    return ""


def router_argv(args: list[str], credentials_directory: str | None) -> list[str]:
    """The router's arguments, with --api-key from the credential when the unit has one."""
    if "--api-key" in args:
        raise SystemExit("sglang_router_launch: the API key comes from the credential only, never from the command line")
    if not credentials_directory:
        return args
    secrets = Path(credentials_directory) / CREDENTIAL
    key = api_key(secrets.read_text()) if secrets.is_file() else ""
    return [*args, "--api-key", key] if key else args


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in MODULES:
        raise SystemExit(f"usage: sglang_router_launch.py {{{'|'.join(MODULES)}}} ROUTER-ARGS...")
    launch = importlib.import_module(argv[0])
    launch.launch_router(launch.parse_router_args(router_argv(argv[1:], os.environ.get("CREDENTIALS_DIRECTORY"))))


if __name__ == "__main__":
    main(sys.argv[1:])
