"""What the project assumes when the declaration is silent: each default written once, used everywhere.

The roles' side is roles/sglang_defaults/defaults/main.yml; tests/unit/test_defaults_home.py keeps the two equal.
"""

from __future__ import annotations

MODEL_SLUG = "model"
MODEL_PATH = "/models/model"
PORT = 30000
BIND_ADDRESS = "127.0.0.1"  # loopback unless the declaration says otherwise
STATE_DIR = "/var/lib/sglang"  # the service user's home: caches of Triton, FlashInfer, torch
SERVICE_USER = "sglang"
CUDA_HOME = "/usr/local/cuda"
# Sets a unit's GPU power limit as it starts and puts the one before back as it stops (as root: ExecStartPre=+,
# ExecStopPost=+); the sglang_service role installs it (roles/sglang_service/files/sglang-power-limit).
POWER_LIMIT_HELPER = "/usr/local/sbin/sglang-power-limit"
DIST_INIT_PORT = 20000  # where rank 0 of a multi-node layout meets the others (--dist-init-addr RANK0:PORT)
FACTS_DIR = "/etc/ansible/facts.d"  # Ansible's local facts: what is installed and what serves
UNIT_DIR = "/etc/systemd/system"
WILDCARD_ADDRESSES = ("0.0.0.0", "::", "")


def local_url(bind_address: str, port: int | str, path: str = "") -> str:
    """The URL a process on the same host reaches a server by: a wildcard bind is reached on loopback."""
    host = "127.0.0.1" if bind_address in WILDCARD_ADDRESSES else bind_address
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}{path}"
