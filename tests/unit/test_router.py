"""The router's unit from its settings (our launcher over smg's or sglang-router's launch_router, a GPU-less
sandbox, the key as a credential, refusals by field), and the launcher's handling of the key."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from sglang_layout import router, secrets
from sglang_layout.errors import DeclarationError
from sglang_layout.hardening import NVIDIA_DEVICES

GOOD = {
    "model_slug": "k26",
    "venv": "/opt/sglang-router/venv-smg-1.13.0",
    "host": "0.0.0.0",
    "port": "30080",
    "policy": "cache_aware",
    "worker_urls": ["http://10.0.0.7:30001", "http://gpu-box-2:30001", "http://[fd00::2]:30001"],
}


def test_the_unit_runs_smg_through_the_launcher_over_the_workers_in_a_sandbox_without_gpus():
    unit = router.router_unit(**GOOD)
    assert unit["name"] == "sglang-router-k26.service"
    assert unit["argv"] == [
        "/opt/sglang-router/venv-smg-1.13.0/bin/python",
        "/opt/sglang-router/sglang_router_launch.py",
        *("smg.launch_router", "--host", "0.0.0.0", "--port", "30080", "--policy", "cache_aware"),
        *("--worker-urls", *GOOD["worker_urls"]),
        *("--health-check-interval-secs", "5", "--health-failure-threshold", "3", "--health-success-threshold", "1"),
        *("--worker-startup-timeout-secs", "1800", "--worker-startup-check-interval", "5"),
        *("--prometheus-host", "127.0.0.1", "--prometheus-port", "29000"),
    ]
    assert unit["health_url"] == "http://127.0.0.1:30080"  # a wildcard bind is reached on loopback
    assert unit["metrics_url"] == "http://127.0.0.1:29000/metrics"  # both packages bind 0.0.0.0 unless told
    assert unit["credential_line"] == "" and "--api-key" not in unit["argv"]
    lines = unit["hardening_lines"]
    assert {"DynamicUser=yes", "PrivateDevices=yes", "ProtectSystem=strict", "NoNewPrivileges=yes"} <= set(lines)
    assert not [line for line in lines if line.startswith(("DeviceAllow=", "LimitMEMLOCK=", "ReadWritePaths="))]
    assert not set(NVIDIA_DEVICES) & {line.split("=", 1)[1] for line in lines}


def test_sglang_router_is_selectable_and_a_key_is_a_credential_never_an_argument():
    unit = router.router_unit(**GOOD, package="sglang-router", secrets_source="/etc/sglang/secrets/router/k26.yaml")
    assert unit["argv"][2] == "sglang_router.launch_router" and unit["package"] == "sglang-router"
    assert unit["credential_line"] == "sglang-secrets.yaml:/etc/sglang/secrets/router/k26.yaml"
    assert not [word for word in unit["argv"] if "key" in word or "secret" in word]


def test_the_workers_load_time_is_the_startup_wait_and_a_crashed_one_leaves_after_three_probes():
    unit = router.router_unit(**GOOD, health_interval="2", worker_load_timeout=600)
    argv = unit["argv"]

    def flag(name: str) -> str:
        return argv[argv.index(name) + 1]

    assert flag("--health-check-interval-secs") == "2" and flag("--health-failure-threshold") == "3"
    assert flag("--worker-startup-timeout-secs") == "600" and flag("--worker-startup-check-interval") == "2"


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
        ({"package": "sglang_router"}, "sglang_router_package", "must be one of smg, sglang-router"),
        ({"metrics_port": "30080"}, "sglang_router_metrics_port", "is the router's own port"),
        ({"metrics_host": "localhost; rm"}, "sglang_router_metrics_host", ""),
        ({"health_interval": 0}, "sglang_router_health_check_interval", ""),
        ({"worker_load_timeout": 2, "health_interval": 5}, "sglang_router_worker_load_timeout", ""),
        ({"secrets_source": "secrets.yaml"}, "sglang_router secrets file", ""),
    ],
)
def test_bad_settings_are_refused_by_field(change, field, problem):
    with pytest.raises(DeclarationError) as caught:
        router.router_unit(**{**GOOD, **change})
    assert field in str(caught.value) and problem in str(caught.value)


def load_launcher():
    path = Path(__file__).resolve().parents[2] / "roles" / "sglang_router" / "files" / "sglang_router_launch.py"
    spec = importlib.util.spec_from_file_location("sglang_router_launch", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "key", ["k" * 32, "it's-a-key:with#marks", "1234567890123456", "'starts-with-a-quote", "true-false-null-key"]
)
def test_the_launcher_reads_the_key_from_the_secrets_file_the_role_writes(tmp_path, key):
    """The same YAML as the servers' (secrets.config_yaml), quoted or not by PyYAML, read back without PyYAML."""
    launcher = load_launcher()
    (tmp_path / "sglang-secrets.yaml").write_text(secrets.config_yaml({"sglang_api_key": key}))
    args = ["--host", "127.0.0.1", "--port", "30080"]
    assert launcher.router_argv(args, str(tmp_path)) == [*args, "--api-key", key]
    assert launcher.router_argv(args, None) == args  # no credential: no key
    assert launcher.router_argv(args, str(tmp_path / "elsewhere")) == args


def test_the_launcher_refuses_a_key_on_its_command_line_and_calls_the_package_in_process(tmp_path, monkeypatch):
    launcher = load_launcher()
    with pytest.raises(SystemExit, match="from the credential only"):
        launcher.router_argv(["--api-key", "x" * 16], None)
    # A stand-in package module records what launch_router got: the key, in this process, not in the environment.
    package = tmp_path / "smg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "launch_router.py").write_text(
        "import os\nseen = {}\n"
        "def parse_router_args(argv):\n    return list(argv)\n"
        "def launch_router(args):\n    seen['args'] = args\n    seen['environ'] = dict(os.environ)\n"
    )
    (tmp_path / "credentials").mkdir()
    (tmp_path / "credentials" / "sglang-secrets.yaml").write_text("api-key: " + "s" * 20 + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path / "credentials"))
    launcher.main(["smg.launch_router", "--port", "1"])
    seen = importlib.import_module("smg.launch_router").seen
    assert seen["args"] == ["--port", "1", "--api-key", "s" * 20]
    assert "s" * 20 not in " ".join(seen["environ"].values())
    with pytest.raises(SystemExit, match="usage"):
        launcher.main(["os", "--port", "1"])
