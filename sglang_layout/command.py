"""The server command line and environment a layout renders to: one place, used by the unit and the checks."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence

from sglang_layout.nodes import NodePlace
from sglang_layout.schema import ArgValue, Layout

# Spellings of the first-class fields; checked against the installed --help like any other flag.
PARALLEL_FLAGS = (("tp", "--tp-size"), ("ep", "--ep-size"), ("pp", "--pp-size"), ("dp", "--dp-size"))


def _value_tokens(value: ArgValue) -> list[str]:
    if isinstance(value, list):
        return [_scalar(item) for item in value]
    return [_scalar(value)]


def _scalar(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


# systemd hands the secrets file to the unit as a credential (LoadCredential=); %d is its directory.
SECRETS_CREDENTIAL = "sglang-secrets.yaml"
SECRETS_FILE_IN_UNIT = f"%d/{SECRETS_CREDENTIAL}"


def server_args(
    layout: Layout, *, model_path: str, port: int, host: str, secrets_file: str | None = None, node: NodePlace | None = None
) -> list[str]:
    """Flags after `python -m sglang.launch_server`, in the field notes' order; a node's place after the sizes.

    Secrets never appear here: SGLang reads them from the YAML file given with --config
    (its values are merged under the command line's), so they stay out of /proc/PID/cmdline.
    """
    argv = ["--model-path", model_path, "--port", str(port), "--host", host]
    for field_name, flag in PARALLEL_FLAGS:
        size = getattr(layout, field_name)
        if size != 1 or field_name == "tp":
            argv += [flag, str(size)]
    if node is not None:
        argv += node.flags()
    for name, value in layout.args.items():
        if value is None or value is False:
            continue  # a layout turns a common switch off with false / null
        argv.append(f"--{name}")
        if value is not True:
            argv += _value_tokens(value)
    if secrets_file:
        argv += ["--config", secrets_file]
    return argv


def launch_command(python: str, args: list[str]) -> list[str]:
    return [python, "-m", "sglang.launch_server", *args]


def cuda_visible_devices(layout: Layout, gpu_ids: Sequence[int] | None = None) -> str:
    """The GPUs a layout uses on each host: the first dp x tp x pp / nnodes of its slice (else of the machine)."""
    ids = list(gpu_ids) if gpu_ids else list(range(layout.gpus_per_node))
    return ",".join(str(gpu) for gpu in ids[: layout.gpus_per_node])


def service_environment(
    layout: Layout,
    *,
    venv: str,
    cuda_home: str,
    python_version: str,
    base_env: Mapping[str, str] | None = None,
    gpu_ids: Sequence[int] | None = None,
) -> dict[str, str]:
    """The unit's environment, as in the field notes: venv's CUDA 13 libraries before the toolkit's."""
    site = f"{venv}/lib/python{python_version}/site-packages/nvidia"
    own = {
        "CUDA_VISIBLE_DEVICES": cuda_visible_devices(layout, gpu_ids),
        "PATH": f"{cuda_home}/bin:{venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LD_LIBRARY_PATH": f"{site}/cu13/lib:{site}/cuda_runtime/lib:{cuda_home}/lib64",
        "CUDA_HOME": cuda_home,
    }
    # The declaration may not set these (sglang_layout.envrules); were one to slip through, the unit's own win.
    declared = {**(base_env or {}), **layout.env}
    return {**own, **{name: value for name, value in declared.items() if name not in own}}


def shell_line(argv: list[str]) -> str:
    return shlex.join(argv)
