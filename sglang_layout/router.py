"""SGLang's router in front of replicas: its unit, from checked settings.

Two packages are supported, each started in-process by our launcher (roles/sglang_router/files/
sglang_router_launch.py) through its own `launch_router(parse_router_args(argv))`:
- `smg`, SGLang's Model Gateway (the maintained successor, the default);
- `sglang-router`, whose last release is 0.3.2.
Both take the same flags we use. With --api-key both answer 401 to a client without the key, before
any worker sees the request, and present that key to the workers (checked with the real packages:
docs/beyond-one-box.md). The launcher reads the key from the unit's credential, so it is never on a
command line.

The router is a separate process that needs no GPU; its sandbox is the servers' without the device
access (sglang_layout.hardening), and it runs as a transient DynamicUser: it writes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from sglang_layout import defaults, hardening, text
from sglang_layout.command import SECRETS_CREDENTIAL
from sglang_layout.schema import MODEL_SLUG
from sglang_layout.unit import systemd_word

# Package on PyPI -> the module whose launch_router/parse_router_args the launcher calls.
PACKAGES = {"smg": "smg.launch_router", "sglang-router": "sglang_router.launch_router"}
# The policies of --policy (both packages) that route over plain replicas.
POLICIES = ("cache_aware", "round_robin", "power_of_two", "random")
# A worker is an http(s) base URL: scheme, host (name, IPv4 or [IPv6]) and port, nothing more (no flags).
WORKER_URL = re.compile(r"https?://(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}")
# systemd hands the root-only secrets file to the unit under this name (LoadCredential=), as for the servers.
# Failed probes before a replica leaves the rotation: a crashed one is out within 3 intervals.
HEALTH_FAILURES = 3


def router_hardening() -> dict[str, hardening.HardeningValue]:
    """The servers' sandbox without GPU devices, memlock or a state directory; devices private, no fixed user."""
    dropped = ("ReadWritePaths", "DevicePolicy", "DeviceAllow", "LimitMEMLOCK")
    base = {name: value for name, value in hardening.defaults("/").items() if name not in dropped}
    return {**base, "PrivateDevices": "yes", "DynamicUser": "yes"}


def health_flags(interval: Any, worker_load_timeout: Any) -> list[str]:
    """Probe every `interval` s; a replica still loading when the router starts (or re-registered after a swap)
    is waited for as long as the servers' own health timeout, the time a model may take to load."""
    interval = text.whole_number("sglang_router_health_check_interval", interval, low=1, high=3600, example=5, from_text=True)
    load = text.whole_number(
        "sglang_router_worker_load_timeout", worker_load_timeout, low=interval, high=86400, example=1800, from_text=True
    )
    return [
        *("--health-check-interval-secs", str(interval), "--health-failure-threshold", str(HEALTH_FAILURES)),
        *("--health-success-threshold", "1", "--worker-startup-timeout-secs", str(load)),
        *("--worker-startup-check-interval", str(min(interval, 10))),
    ]


def _worker_urls(worker_urls: Sequence[Any]) -> list[str]:
    """The replicas' base URLs, each once; DeclarationError naming the field otherwise."""
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
    return urls


def router_unit(
    *,
    model_slug: str,
    venv: str,
    host: str,
    port: Any,
    policy: str,
    worker_urls: Sequence[Any],
    package: str = "smg",
    launcher: str = "/opt/sglang-router/sglang_router_launch.py",
    health_interval: Any = 5,
    worker_load_timeout: Any = 1800,
    metrics_host: str = "127.0.0.1",
    metrics_port: Any = 29000,
    secrets_source: str | None = None,
) -> dict[str, Any]:
    """The router's unit (name, ExecStart, credential, sandbox lines); DeclarationError naming the field otherwise."""
    slug = text.matching(
        "sglang_model_slug", model_slug, MODEL_SLUG, max_length=32, what="a short name of [a-z0-9-]", fix="write e.g. k26"
    )
    if package not in PACKAGES:
        raise text.refuse("sglang_router_package", package, f"must be one of {', '.join(PACKAGES)}", "write smg (the default)")
    venv = text.absolute_path("sglang_router venv", venv, example="/opt/sglang-router/venv-smg-1.13.0")
    launcher = text.absolute_path("sglang_router launcher", launcher, example="/opt/sglang-router/sglang_router_launch.py")
    host = text.bind_address("sglang_router_host", host)
    port = text.whole_number("sglang_router_port", port, low=1, high=65535, example=30080, from_text=True)
    metrics_host = text.bind_address("sglang_router_metrics_host", metrics_host)
    metrics_port = text.whole_number("sglang_router_metrics_port", metrics_port, low=1, high=65535, example=29000, from_text=True)
    if metrics_port == port:
        raise text.refuse("sglang_router_metrics_port", metrics_port, "is the router's own port", "pick another, e.g. 29000")
    if policy not in POLICIES:
        raise text.refuse("sglang_router_policy", policy, f"must be one of {', '.join(POLICIES)}", "write e.g. cache_aware")
    urls = _worker_urls(worker_urls)
    if secrets_source is not None:
        secrets_source = text.absolute_path(
            "sglang_router secrets file", secrets_source, example="/etc/sglang/secrets/router-k26.yaml"
        )
    argv = [f"{venv}/bin/python", launcher, PACKAGES[package], "--host", host, "--port", str(port)]
    argv += ["--policy", policy, "--worker-urls", *urls, *health_flags(health_interval, worker_load_timeout)]
    argv += ["--prometheus-host", metrics_host, "--prometheus-port", str(metrics_port)]
    return {
        "name": f"sglang-router-{slug}.service",
        "package": package,
        "argv": argv,
        "exec_start": " ".join(systemd_word(word) for word in argv),
        "credential_line": f"{SECRETS_CREDENTIAL}:{secrets_source}" if secrets_source else "",
        "hardening_lines": hardening.unit_lines(router_hardening()),
        "worker_urls": urls,
        "health_url": defaults.local_url(host, port),
        "metrics_url": defaults.local_url(metrics_host, metrics_port, "/metrics"),
    }
