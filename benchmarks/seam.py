"""The Python/Ansible seam, named once: what benchmarks/ hands the playbooks and what it reads back from them.

Python runs the playbooks through ansible-runner and reads their events; the two sides agree on the names
below and nowhere else. tests/unit/test_seam.py reads every playbook and role: it fails when a playbook sets
a stats key, reads an extra var or reports a field this table does not name, when a name here is no longer
used there, and when benchmarks/ spells one of these names itself instead of reading it from here.
"""

from __future__ import annotations

# The playbooks Python runs (relative to the repository).
DEPLOY = "deploy.yml"
PREFLIGHT = "playbooks/preflight.yml"
BENCHMARK = "playbooks/benchmark.yml"
BENCHMARK_STOP = "playbooks/benchmark_stop.yml"
# benchmark.yml's per-level tasks: their command task runs Locust, their set_stats task ends the level.
LEVEL_TASKS = "playbooks/tasks/benchmark_level.yml"

# set_stats keys (ansible-runner's artifact data), and who sets them.
SWAPS = "sglang_service_swaps"  # roles/sglang_service/tasks/swap.yml: {host: SWAP_FIELDS}
LEVELS_RUN = "bench_levels_run"  # playbooks/tasks/benchmark_level.yml: {level: {rc, stderr}}
SERVER = "bench_server"  # playbooks/benchmark.yml: the server measured (host, url, layout, ...)
STATS = (SWAPS, LEVELS_RUN, SERVER)
# One host's swap, as SWAPS reports it.
SWAP_FIELDS = ("unit", "swapped", "load_s", "startup", "gpu_used_mib")

# Extra vars Python passes (besides the workload's own, benchmarks.workload.Workload.extravars).
DEPLOY_VARS = ("target", "layout", "sglang_layouts")
BENCH_VARS = (
    *("bench_output_dir", "bench_loadgen", "bench_locustfile", "bench_api_key", "bench_work_dir"),
    *("bench_gpu_work_dir", "bench_locust", "bench_prompts_source", "bench_gate_dir", "bench_url"),
    *("bench_server_host", "bench_remote_loadgen"),
)

# Modules whose task results (or progress) Python reads from the events, by their action's name.
PREFLIGHT_ACTION = "sglang_preflight"
VERDICT_ACTION = "sglang_args_verdict"
READ_FILES_ACTION = "sglang_read_files"
WAIT_ACTION = "sglang_wait_healthy"  # a multi-node swap's health wait: the load's start, as the controller sees it
FOLLOW_ACTION = "sglang_swap_follow"  # a one-box swap followed on the host: the load's start likewise
ACTIONS = (PREFLIGHT_ACTION, VERDICT_ACTION, READ_FILES_ACTION, WAIT_ACTION, FOLLOW_ACTION)

# Local facts (facts.d) and the facts the roles set, read back from preflight.yml's events.
VENV_FACT = "sglang_venv"
GPUS_FACT = "sglang_gpus"
SERVING_FACT = "sglang_service_serving"
FACTS = (VENV_FACT, GPUS_FACT, SERVING_FACT)
