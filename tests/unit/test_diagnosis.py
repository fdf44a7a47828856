"""A failed start's journal -> a cause a person can act on, with the lines that show it."""

import pytest

from sglang_layout.diagnosis import diagnose
from tests.unit.test_gpus import host_helpers

# Journal excerpts in the shapes SGLang and its libraries print them.
ARGPARSE = (
    "usage: launch_server.py [-h] --model-path MODEL_PATH ...\n"
    "launch_server.py: error: ambiguous option: --cuda-graph-max-bs could match "
    "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"
)
CHOICE = "launch_server.py: error: argument --moe-a2a-backend: invalid choice: 'bogus' (choose from 'none', 'deepep')"
OOM = """[2026-11-30 10:00:01] Load weight begin.
Traceback (most recent call last):
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 56.00 GiB. GPU 0 has a total capacity of 94.97 GiB"""
ZERO = """  File "/opt/sglang/venv/lib/python3.12/site-packages/sglang/srt/layers/moe/fused_moe_triton/layer.py", line 213
    self.intermediate_size_per_partition = intermediate_size // self.moe_tp_size
ZeroDivisionError: integer division or modulo by zero"""
PORT = "OSError: [Errno 98] error while attempting to bind on address ('0.0.0.0', 30001): address already in use"
MODEL = "OSError: /srv/models/Kimi-K2.6 does not appear to have a file named config.json."
# flashinfer's MNNVL all-to-all on x86_64 under a default-capability sandbox (flashinfer-ai/flashinfer#4089).
PTRACE = (
    "RuntimeError: pidfd_getfd(pidfd=41, fd=38) failed with errno 1: Operation not permitted. "
    "... try adding --cap-add=SYS_PTRACE to your docker run command."
)
# systemd's lines about a start that died while systemd set it up (systemd 252; the CGROUP one came from a CI run).
CGROUP = """sglang-k26-ep8.service: Failed to attach to cgroup /system.slice/sglang-k26-ep8.service: No such file or directory
sglang-k26-ep8.service: Main process exited, code=exited, status=219/CGROUP
sglang-k26-ep8.service: Failed with result 'exit-code'."""
NAMESPACE = """sglang-k26-ep8.service: Failed to set up mount namespacing: /srv/gone: No such file or directory
sglang-k26-ep8.service: Failed at step NAMESPACE spawning /opt/sglang/venv/bin/python: No such file or directory"""
NCCL = "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error"


@pytest.mark.parametrize(
    ("journal", "cause", "quoted"),
    [
        (ARGPARSE, "flag", "ambiguous option: --cuda-graph-max-bs"),
        (CHOICE, "flag", "invalid choice: 'bogus'"),
        (OOM, "oom", "CUDA out of memory"),
        (ZERO, "parallel_width", "ZeroDivisionError"),
        (PORT, "port", "address already in use"),
        (MODEL, "model_missing", "config.json"),
        (NCCL, "nccl", "NCCL error"),
        (PTRACE, "ptrace", "pidfd_getfd"),
        (CGROUP, "setup", "status=219/CGROUP"),
        (NAMESPACE, "setup", "Failed at step NAMESPACE"),
    ],
)
def test_each_failure_is_named_and_its_lines_quoted(journal, cause, quoted):
    found = diagnose(journal)
    assert found.cause == cause
    assert any(quoted in line for line in found.lines)
    assert found.advice and found.title in found.message()


def test_an_oom_buried_under_a_later_nccl_teardown_is_still_an_oom():
    found = diagnose(OOM + "\n" + "[rank3] NCCL WARN Connection closed by remote peer")
    assert found.cause == "oom"


def test_a_timeout_without_a_known_error_says_so_and_quotes_the_last_lines():
    journal = "\n".join(f"[t] Load weight progress {i}%" for i in range(0, 100, 10))
    found = diagnose(journal, timed_out=True)
    assert found.cause == "timeout" and "sglang_service_health_timeout" in found.advice
    assert found.lines[-1] == "[t] Load weight progress 90%" and len(found.lines) == 6


def test_an_unknown_crash_quotes_the_error_lines_not_the_noise():
    found = diagnose("[t] starting\n[t] loading\nRuntimeError: something new\n[t] exiting")
    assert found.cause == "unknown" and found.lines == ["RuntimeError: something new"]


def test_an_empty_journal_is_said_plainly():
    found = diagnose("")
    assert found.cause == "unknown" and "(the journal is empty)" in found.message()


def test_a_servers_own_exit_status_is_not_a_set_up_failure():
    found = diagnose("RuntimeError: boom\nx.service: Main process exited, code=exited, status=1/FAILURE")
    assert found.cause == "unknown"


def test_one_start_is_read_with_systemds_lines_about_it_and_a_never_started_unit_whole():
    journal_argv = host_helpers().journal_argv
    argv = journal_argv("u.service", " 0f3a \n", 80)
    assert argv[-3:] == ["_SYSTEMD_INVOCATION_ID=0f3a", "+", "INVOCATION_ID=0f3a"] and "--lines=80" in argv
    assert journal_argv("u.service", "", 80)[-1] == "--unit=u.service"
