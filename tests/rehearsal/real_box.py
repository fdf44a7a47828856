"""A rehearsal box provisioned with the REAL sglang (CPU, the tiny model), for the real tier and the real-server
search comparison (tests/rehearsal/real_search.py): the wheelhouse bound in read-only as an offline mirror, the
stand-in nvidia-smi for the GPU record only, and the test-only vllm shim on the venv's path (never a role's)."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

from tests.rehearsal import box as boxes
from tests.rehearsal import real_sglang, standin, tiny_model
from tests.rehearsal.playbook import run_playbook, write_inventory

SHIM = "/opt/test-shim"


@contextlib.contextmanager
def provisioned(
    real_python: Path, cuda_repo_url: str, directory: Path, layouts: dict, **host_vars: object
) -> Iterator[tuple[boxes.Box, Path, int]]:
    """(box, inventory, port) of a box provisioned by playbooks/provision.yml with sglang from the wheelhouse."""
    wheels, uv_wheels = real_sglang.wheelhouse(), real_sglang.uv_wheelhouse()
    with boxes.running_box(binds={str(wheels): "/opt/real-wheelhouse", str(uv_wheels): "/opt/uv-wheelhouse"}) as box:
        standin.make_gpu_host(box.root, gpu_count=1, gpu_memory_gib=16.0)  # nvidia-smi for the GPU record
        model = box.root / "srv" / "models" / "tiny-llama"
        shutil.copytree(tiny_model.build(real_python), model)
        (model / "model.safetensors").chmod(0o600)  # as torch saves it: deploy must say so before loading
        tiny_model.shim(box.root / SHIM.lstrip("/"))
        port = boxes.free_port()
        inventory = write_inventory(
            box,
            directory,
            cuda_toolkit_repo_base_url=cuda_repo_url,
            sglang_venv_find_links=["/opt/real-wheelhouse", "/opt/uv-wheelhouse"],
            sglang_venv_no_index=True,
            sglang_model_path="/srv/models/tiny-llama",
            sglang_model_slug="tiny",
            sglang_port=port,
            sglang_bind_address="127.0.0.1",
            # The scheduler waits for requests without spinning a core (tests/rehearsal/real_server.py).
            sglang_common_args={"device": "cpu", "max-total-tokens": 65536, "sleep-on-idle": True},
            sglang_common_env={},
            sglang_layouts=layouts,
            sglang_service_health_timeout=600,
            sglang_service_health_interval=1,
            **host_vars,
        )
        done = run_playbook("playbooks/provision.yml", inventory, timeout=1800)
        if done.returncode != 0:
            raise RuntimeError(f"provision.yml failed on the real box:\n{done.output[-4000:]}")
        put_shim_on_the_venv_path(box)
        yield box, inventory, port


def put_shim_on_the_venv_path(box: boxes.Box) -> None:
    """TEST-ONLY: a .pth file in the provisioned venv's site-packages names the shim's folder."""
    record = json.loads(box.run("sudo", "cat", "/etc/ansible/facts.d/sglang_venv.fact").stdout)["versions"]["0.5.23"]
    purelib = box.run(record["python"], "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    (box.root / purelib.lstrip("/") / "test-shim.pth").write_text(SHIM + "\n")
