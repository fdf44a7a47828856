"""What the project assumes when the declaration is silent: each default written once, used everywhere."""

from __future__ import annotations

MODEL_SLUG = "model"
MODEL_PATH = "/models/model"
PORT = 30000
BIND_ADDRESS = "127.0.0.1"  # loopback unless the declaration says otherwise
STATE_DIR = "/var/lib/sglang"  # the service user's home: caches of Triton, FlashInfer, torch
SERVICE_USER = "sglang"
CUDA_HOME = "/usr/local/cuda"
DIST_INIT_PORT = 20000  # where rank 0 of a multi-node layout meets the others (--dist-init-addr RANK0:PORT)
