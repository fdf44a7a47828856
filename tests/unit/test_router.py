"""The router's unit from its settings: SGLang's launch_router command, a GPU-less sandbox, refusals by field."""

from __future__ import annotations

import pytest

from sglang_layout import router
from sglang_layout.errors import DeclarationError
from sglang_layout.hardening import NVIDIA_DEVICES

GOOD = {
    "model_slug": "k26",
    "venv": "/opt/sglang-router/venv-0.3.2",
    "host": "0.0.0.0",
    "port": "30080",
    "policy": "cache_aware",
    "worker_urls": ["http://10.0.0.7:30001", "http://gpu-box-2:30001", "http://[fd00::2]:30001"],
}


def test_the_unit_runs_launch_router_over_the_workers_in_a_sandbox_without_gpus():
    unit = router.router_unit(**GOOD)
    assert unit["name"] == "sglang-router-k26.service"
    assert unit["argv"] == [
        "/opt/sglang-router/venv-0.3.2/bin/python",
        *("-m", "sglang_router.launch_router", "--host", "0.0.0.0", "--port", "30080", "--policy", "cache_aware"),
        *("--worker-urls", *GOOD["worker_urls"]),
    ]
    assert unit["health_url"] == "http://127.0.0.1:30080"  # a wildcard bind is reached on loopback
    lines = unit["hardening_lines"]
    assert {"DynamicUser=yes", "PrivateDevices=yes", "ProtectSystem=strict", "NoNewPrivileges=yes"} <= set(lines)
    assert not [line for line in lines if line.startswith(("DeviceAllow=", "LimitMEMLOCK=", "ReadWritePaths="))]
    assert not set(NVIDIA_DEVICES) & {line.split("=", 1)[1] for line in lines}


@pytest.mark.parametrize(
    ("change", "field", "problem"),
    [
        ({"worker_urls": ["http://10.0.0.7:30001 --api-key x"]}, "sglang_router_worker_urls", "must be a base URL"),
        ({"worker_urls": ["10.0.0.7:30001"]}, "sglang_router_worker_urls", "must be a base URL"),
        ({"worker_urls": ["http://a:1", "http://a:1"]}, "sglang_router_worker_urls", "names a worker twice"),
        ({"worker_urls": []}, "sglang_router_workers", "names no worker"),
        ({"policy": "least_loaded"}, "sglang_router_policy", "must be one of cache_aware"),
        ({"port": "0"}, "sglang_router_port", ""),
        ({"host": "0.0.0.0 --x"}, "sglang_router_host", ""),
        ({"model_slug": "K 26"}, "sglang_model_slug", ""),
    ],
)
def test_bad_settings_are_refused_by_field(change, field, problem):
    with pytest.raises(DeclarationError) as caught:
        router.router_unit(**{**GOOD, **change})
    assert field in str(caught.value) and problem in str(caught.value)
