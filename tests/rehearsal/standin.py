"""Building and running the STAND-IN sglang package (tests only): source copy, wheelhouse, local server."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import yaml

from benchmarks.metrics import decode_rate
from benchmarks.records import RequestRecord
from tests.rehearsal.box import CACHE, built_once, free_port
from tests.rehearsal.stopping import die_with_parent

TESTS = Path(__file__).resolve().parents[1]
SOURCE = TESTS / "standins" / "sglang"
NVIDIA_SMI = TESTS / "standins" / "nvidia-smi" / "nvidia-smi"
FLAGS = TESTS / "data" / "sglang-0.5.23-flags.json"
# The stand-in's dependencies, pinned with the project's own (requirements-dev.txt).
RUNTIME_DEPS = ("aiohttp==3.14.5", "pyyaml==6.0.3")
ROUTER_DEFAULTS = TESTS.parent / "roles" / "sglang_router" / "defaults" / "main.yml"


LOADGEN_DEFAULTS = TESTS.parent / "roles" / "sglang_loadgen" / "defaults" / "main.yml"
VENV_DEFAULTS = TESTS.parent / "roles" / "sglang_venv" / "defaults" / "main.yml"


def locust_requirement() -> str:
    """The REAL Locust the load-generator role pins (requirements.txt's): boxes install it from the wheelhouse."""
    version = LOADGEN_DEFAULTS.read_text().split('sglang_loadgen_locust_version: "', 1)[1].split('"', 1)[0]
    return f"locust=={version}"


def uv_requirement() -> str:
    """The uv the venv role puts into the venv before it installs sglang with it: boxes install it from the wheelhouse."""
    return f"uv=={yaml.safe_load(VENV_DEFAULTS.read_text())['sglang_venv_uv_version']}"


def router_requirements() -> list[str]:
    """The REAL routers the role pins, smg and sglang-router (not stand-ins): boxes install them from the wheelhouse."""
    versions = yaml.safe_load(ROUTER_DEFAULTS.read_text())["sglang_router_versions"]
    return [f"{package}=={version}" for package, version in sorted(versions.items())]


def source_tree(destination: Path) -> Path:
    """A buildable copy of the stand-in with its flag table (the real 0.5.23 names and choices)."""
    shutil.copytree(SOURCE, destination, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    shutil.copy(FLAGS, destination / "sglang" / "flags.json")
    return destination


def _digest() -> str:
    hasher = hashlib.sha256(json.dumps([*RUNTIME_DEPS, *router_requirements(), locust_requirement(), uv_requirement()]).encode())
    for path in sorted(p for p in SOURCE.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        hasher.update(path.relative_to(SOURCE).as_posix().encode() + path.read_bytes())
    hasher.update(FLAGS.read_bytes())
    return hasher.hexdigest()[:16]


def wheelhouse() -> Path:
    """A local wheelhouse with the stand-in sglang wheel and its dependencies, the real routers (smg,
    sglang-router) and Locust with their own, and the uv that installs them, cached by content."""
    target = CACHE / f"wheelhouse-{_digest()}"

    def build() -> str:
        source = source_tree(target / "src")
        pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, "wheel", "--no-deps", "-w", str(target), str(source)], check=True)
        subprocess.run([*pip, "download", "--only-binary=:all:", "-d", str(target), *RUNTIME_DEPS], check=True)
        subprocess.run([*pip, "download", "--only-binary=:all:", "-d", str(target), *router_requirements()], check=True)
        tools = [locust_requirement(), uv_requirement()]
        subprocess.run([*pip, "download", "--only-binary=:all:", "-d", str(target), *tools], check=True)
        shutil.rmtree(source)
        return ""

    return built_once(target, build)


def write_simulation(path: Path, **settings: object) -> Path:
    path.write_text(json.dumps(settings))
    return path


# Where a rehearsal box keeps its offline mirror of PyPI (the stand-in wheelhouse).
BOX_WHEELHOUSE = "/opt/wheelhouse"


def make_gpu_host(box_root: Path, **simulation: object) -> None:
    """Give a rehearsal box what a GPU host has at its edges: a (stand-in) nvidia-smi answering for the
    simulated GPUs, the simulation file the stand-in server reads, and a local wheelhouse in place of PyPI.
    """
    shutil.copy(NVIDIA_SMI, box_root / "usr" / "local" / "bin" / "nvidia-smi")
    write_simulation(box_root / "etc" / "sglang-standin.json", **simulation)
    shutil.copytree(wheelhouse(), box_root / BOX_WHEELHOUSE.lstrip("/"), dirs_exist_ok=True)


def provision_vars(cuda_repo_base_url: str) -> dict[str, object]:
    """Role settings that point provisioning at the stand-ins (a mirror and a wheelhouse, as an offline site would)."""
    return {
        "cuda_toolkit_repo_base_url": cuda_repo_base_url,
        "sglang_venv_find_links": [BOX_WHEELHOUSE],
        "sglang_venv_no_index": True,
    }


def wait_http(url: str, timeout: float, process: subprocess.Popen | None = None) -> int:
    """Poll url until it answers 200; return the last status seen (0 when nothing answered)."""
    deadline = time.monotonic() + timeout
    status = 0
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            return status
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        except OSError:
            pass
        time.sleep(0.05)
    return status


def stream_chat(base_url: str, tokens: int) -> tuple[int, float]:
    """One streaming chat request with ignore_eos: (server-counted tokens, client-measured decode tok/s)."""
    body = {
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    request = urllib.request.Request(
        base_url + "/v1/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    times: list[float] = []
    usage: dict = {}
    with urllib.request.urlopen(request, timeout=60) as response:
        for raw in response:
            line = raw.decode().strip()
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                if chunk["choices"]:
                    times.append(time.monotonic())
                usage = chunk.get("usage") or usage
    return usage.get("completion_tokens", 0), (len(times) - 1) / (times[-1] - times[0])


@contextlib.contextmanager
def local_server(tmp: Path, *flags: str, **simulation: object) -> Iterator[tuple[subprocess.Popen, str, Path]]:
    """Run the stand-in from source on loopback: (process, base URL, log path). Always stopped after."""
    source = source_tree(tmp / "standin-src")
    model = tmp / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text('{"architectures": ["StandInForCausalLM"]}')
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(source),
        "SGLANG_STANDIN_CONFIG": str(write_simulation(tmp / "sim.json", **simulation)),
    }
    log = tmp / "server.log"
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(model), "--host", "127.0.0.1", "--port", str(port)]
    with open(log, "w") as out:
        process = subprocess.Popen([*argv, *flags], stdout=out, stderr=subprocess.STDOUT, env=env, preexec_fn=die_with_parent)
    try:
        yield process, f"http://127.0.0.1:{port}", log
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def serving_locally(tmp: Path, *flags: str, **simulation: object) -> Iterator[str]:
    """The stand-in on loopback, once it answers /health_generate: its base URL. Always stopped after."""
    with local_server(tmp, *flags, **simulation) as (process, url, _):
        assert wait_http(url + "/health_generate", 20, process) == 200
        yield url


def emitted(url: str) -> dict:
    """STAND-IN only: the server's own log of what it sent (/standin/emitted, on the client's CLOCK_MONOTONIC)."""
    with urllib.request.urlopen(url + "/standin/emitted", timeout=10) as answer:
        return json.loads(answer.read())


def sent_streams(log: dict) -> list[RequestRecord]:
    """Each stream as the stand-in sent it ([send time, cumulative tokens] per chunk), in the client's record shape."""
    streams = []
    for chunks in log["streams"]:
        counts = [int(n) for _, n in chunks]
        streams.append(
            RequestRecord(
                level=0,
                phase="measured",
                sent=chunks[0][0],
                output_tokens=counts[-1],
                chunk_times=[t for t, _ in chunks],
                chunk_tokens=[n - before for n, before in zip(counts, [0, *counts[:-1]], strict=True)],
            )
        )
    return streams


def sent_decode_rate(streams: list[RequestRecord], window: list[float]) -> float:
    """The median decode rate (benchmarks/metrics.py's definition) of the streams the server began inside a
    level's measured window: what the client should measure, the server's own lateness under load included."""
    lo, hi = window
    return statistics.median(rate for stream in streams if lo <= stream.sent <= hi and (rate := decode_rate(stream)) is not None)
