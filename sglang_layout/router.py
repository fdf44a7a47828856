"""SGLang's router (the `sglang-router` package) in front of replicas: its unit, from checked settings.

The router is a separate process that needs no GPU; its sandbox is the servers' without the device
access (sglang_layout.hardening), and it runs as a transient DynamicUser: it writes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from sglang_layout import defaults, hardening, text
from sglang_layout.schema import MODEL_SLUG
from sglang_layout.unit import systemd_word

# The policies of sglang_router.launch_router --policy (0.3.2) that route over plain replicas.
POLICIES = ("cache_aware", "round_robin", "power_of_two", "random")
# A worker is an http(s) base URL: scheme, host (name, IPv4 or [IPv6]) and port, nothing more (no flags).
WORKER_URL = re.compile(r"https?://(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}")


def router_hardening() -> dict[str, hardening.HardeningValue]:
    """The servers' sandbox without GPU devices, memlock or a state directory; devices private, no fixed user."""
    dropped = ("ReadWritePaths", "DevicePolicy", "DeviceAllow", "LimitMEMLOCK")
    base = {name: value for name, value in hardening.defaults("/").items() if name not in dropped}
    return {**base, "PrivateDevices": "yes", "DynamicUser": "yes"}


def router_unit(*, model_slug: str, venv: str, host: str, port: Any, policy: str, worker_urls: Sequence[Any]) -> dict[str, Any]:
    """The router's unit (name, ExecStart, sandbox lines); DeclarationError naming the field otherwise."""
    slug = text.matching(
        "sglang_model_slug", model_slug, MODEL_SLUG, max_length=32, what="a short name of [a-z0-9-]", fix="write e.g. k26"
    )
    venv = text.absolute_path("sglang_router venv", venv, example="/opt/sglang-router/venv-0.3.2")
    host = text.bind_address("sglang_router_host", host)
    port = text.whole_number("sglang_router_port", port, low=1, high=65535, example=30080, from_text=True)
    if policy not in POLICIES:
        raise text.refuse("sglang_router_policy", policy, f"must be one of {', '.join(POLICIES)}", "write e.g. cache_aware")
    if not worker_urls:
        raise text.refuse(
            "sglang_router_workers", list(worker_urls), "names no worker", "list the inventory hosts (or URLs) it routes to"
        )
    urls = []
    for url in worker_urls:
        if not isinstance(url, str) or not WORKER_URL.fullmatch(url):
            raise text.refuse(
                "sglang_router_worker_urls", url, "must be a base URL http://HOST:PORT", "write e.g. http://10.0.0.7:30001"
            )
        urls.append(url)
    if len(set(urls)) != len(urls):
        raise text.refuse("sglang_router_worker_urls", urls, "names a worker twice", "list each replica once")
    argv = [f"{venv}/bin/python", "-m", "sglang_router.launch_router", "--host", host, "--port", str(port)]
    argv += ["--policy", policy, "--worker-urls", *urls]
    return {
        "name": f"sglang-router-{slug}.service",
        "argv": argv,
        "exec_start": " ".join(systemd_word(word) for word in argv),
        "hardening_lines": hardening.unit_lines(router_hardening()),
        "worker_urls": urls,
        "health_url": defaults.local_url(host, port),
    }
