"""The endpoint under test: a checked base URL, and what the server says it is (/server_info)."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from typing import Any


class EndpointError(ValueError):
    """The endpoint cannot be benchmarked: says what is wrong and what to do."""


# The environment variable a user may give the server's API key in. The CLI takes it out of its own
# environment once read, so no child (ansible-playbook, ssh, the modules, Locust) inherits it.
API_KEY_VARIABLE = "SGLANG_API_KEY"
SECRET_ENVIRONMENT = frozenset({API_KEY_VARIABLE})

HOST_NAME = re.compile(r"[A-Za-z0-9._-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\]")


def check_url(url: str) -> str:
    """A base URL we can benchmark, or EndpointError naming the problem (a password in it is never echoed)."""
    malformed = "give it as http://HOST:PORT (e.g. http://10.0.0.5:30001)"
    if not isinstance(url, str) or len(url) > 2048 or any(ord(char) < 0x21 or ord(char) == 0x7F for char in url):
        raise EndpointError(f"endpoint URL {url[:80]!r} is malformed (spaces or control characters): {malformed}")
    try:
        parsed = urllib.parse.urlsplit(url)
        port = parsed.port  # raises on a port that is not a number or out of range
    except ValueError as exc:
        raise EndpointError(f"endpoint URL {url[:80]!r} is malformed ({exc}): {malformed}") from exc
    if "@" in parsed.netloc:
        raise EndpointError(
            "endpoint URL holds a user or password (user:password@): give the API key in $SGLANG_API_KEY or "
            "--api-key-file instead, so it stays out of folder names and records"
        )
    host = parsed.netloc.rsplit(":", 1)[0] if port is not None else parsed.netloc
    if parsed.scheme not in ("http", "https") or not parsed.hostname or not HOST_NAME.fullmatch(host):
        raise EndpointError(f"endpoint URL {url[:80]!r} is malformed: {malformed}")
    return f"{parsed.scheme}://{parsed.netloc}"


def probe(url: str, api_key: str = "", timeout: float = 10) -> dict[str, Any]:
    """Ask the server what it is (/server_info) before spending minutes on a sweep."""
    request = urllib.request.Request(url + "/server_info", headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            info = json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise EndpointError(f"{url} refused the request ({exc.code}): pass the server's --api-key with --api-key") from exc
        if exc.code == 404:
            return {}  # an OpenAI-compatible server without SGLang's /server_info
        raise EndpointError(f"{url}/server_info answered HTTP {exc.code}: the server is not ready or not SGLang") from exc
    except (OSError, ValueError) as exc:
        raise EndpointError(
            f"{url} is unreachable ({exc}): check the server is running (playbooks/status.yml) "
            "and that this machine can reach its port"
        ) from exc
    return info if isinstance(info, dict) else {}


def served_model(url: str, api_key: str = "", timeout: float = 10) -> str:
    """The one model the endpoint serves (/v1/models), or '' when it lists none or several.

    SGLang serves any model name, but a router routes by it: smg answers 404 "No worker available for
    model 'default'" to a name no worker serves, so a sweep through it names the served model."""
    request = urllib.request.Request(url + "/v1/models", headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            listed = json.loads(answer.read() or b"{}").get("data")
    except (OSError, ValueError, AttributeError):
        return ""
    ids = {item.get("id") for item in listed if isinstance(item, dict)} if isinstance(listed, list) else set()
    return ids.pop() if len(ids) == 1 and all(isinstance(i, str) for i in ids) else ""
