"""Why a layout's server did not become healthy: its journal classified into a cause a person can act on."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sglang_layout import defaults


@dataclass(frozen=True)
class Cause:
    key: str
    title: str
    patterns: tuple[re.Pattern[str], ...]
    advice: str


def _patterns(*texts: str) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(text, re.IGNORECASE) for text in texts)


# In order: the first cause with a matching line wins. Argparse and bind errors come first because
# they are certain; OOM and width errors often arrive wrapped in later, vaguer tracebacks.
CAUSES = (
    # systemd's own exit statuses (200-243, systemd.exec(5) "Process exit codes"): the process died while
    # systemd set it up, before SGLang ran, so the server's own lines are absent.
    Cause(
        "setup",
        "systemd could not set up the server's process (it never ran)",
        _patterns(r"status=2([0-3]\d|4[0-3])/[A-Z_]+", r"Failed at step \w+ spawning", r"Failed to attach to cgroup"),
        'The step is named after status=NNN/ (systemd.exec(5), "Process exit codes"): USER/GROUP/CHDIR point at '
        "sglang_service_user or the state directory; NAMESPACE, CAPABILITIES, SECCOMP or CGROUP at the sandbox "
        "(sglang_service_hardening). CGROUP right after a restart of the same unit can be its old processes "
        "still leaving: deploy again.",
    ),
    Cause(
        "flag",
        "SGLang refused a command-line flag (argparse, exit 2)",
        _patterns(
            r"error: (unrecognized arguments|ambiguous option|argument --?\S+: invalid choice|argument --?\S+:)",
            r"the following arguments are required",
        ),
        "Fix the flag in the layout's args (or sglang_common_args); keep preflight on, it checks flags against "
        "the installed version's --help.",
    ),
    Cause(
        "port",
        "the port is already in use",
        _patterns(r"address already in use", r"\[Errno 98\]"),
        "Another process holds the port: find it with `ss -ltnp`, stop it, or change sglang_port "
        "(on rank 0 of a multi-node layout, also sglang_dist_init_port).",
    ),
    Cause(
        "model_missing",
        "the model files are missing or unreadable",
        _patterns(
            r"does not appear to have a file named config\.json",
            r"is not a local folder and is not a valid model",
            r"Repo id must be",
            r"No such file or directory: .*(config\.json|safetensors)",
            r"Permission denied: .*(config\.json|safetensors|/models?/)",
        ),
        "Check sglang_model_path exists on the host and the service user can read it.",
    ),
    Cause(
        "ptrace",
        "the sandbox refused ptrace permission between the server's ranks (pidfd_getfd)",
        _patterns(r"pidfd_getfd.*(Operation not permitted|errno 1\b|EPERM)", r"--cap-add=SYS_PTRACE"),
        "CUDA memory handles passed between ranks need the call and the permission: give this layout "
        "hardening: {SystemCallFilter: ['@system-service', pidfd_getfd]} (systemd puts pidfd_getfd in @debug), "
        "and where kernel.yama.ptrace_scope is 1 also {AmbientCapabilities: CAP_SYS_PTRACE, "
        "CapabilityBoundingSet: CAP_SYS_PTRACE} (docs/security.md).",
    ),
    Cause(
        "oom",
        "out of GPU memory",
        _patterns(r"out of memory", r"OutOfMemoryError", r"Not enough memory", r"CUDA_ERROR_OUT_OF_MEMORY"),
        "The weights do not fit the layout's GPUs: use more GPUs (larger tp x pp x dp), a lower "
        "mem-fraction-static, a smaller context, or a more quantized checkpoint.",
    ),
    Cause(
        "parallel_width",
        "a parallel-width error (EP nests inside TP)",
        _patterns(
            r"ZeroDivisionError", r"ep_size.*(divisible|divide)", r"(divisible|divide).*ep_size", r"invalid device ordinal"
        ),
        "ep must divide tp (MoE TP width = tp // ep // moe_dp >= 1) and dp x tp x pp must not exceed the GPUs: "
        "on 8 GPUs write e.g. tp 8, ep 4.",
    ),
    Cause(
        "rendezvous",
        "the nodes of a multi-node layout did not all meet at rank 0's --dist-init-addr",
        _patterns(
            r"client socket has (timed out|failed to connect)",
            r"DistNetworkError",
            r"waiting for clients\. \d+/\d+ clients joined",
        ),
        "Every node must start together and reach rank 0 at sglang_node_address:sglang_dist_init_port: check that "
        "port is open between the nodes, that rank 0 started (its journal), and that the nodes group lists them in order.",
    ),
    Cause(
        "peer_lost",
        "another node of this multi-node layout went away (this node only saw it leave)",
        _patterns(r"ncclRemoteError", r"remote process exited or there was a network error", r"Connection closed by remote peer"),
        "The cause is on the other node: read its diagnosis (every node's journal is read), e.g. an out-of-memory "
        "or a killed process there; a network between the nodes that drops connections looks the same.",
    ),
    Cause(
        "nccl",
        "an NCCL (GPU communication) error",
        _patterns(r"NCCL error", r"nccl(Internal|System|Unhandled|Invalid)\w*Error", r"NCCL WARN"),
        "Check NCCL_P2P_LEVEL / NCCL_IB_DISABLE in the environment, GPU topology (nvidia-smi topo -m) and "
        "that no other process holds the GPUs; NCCL_DEBUG=INFO in the layout's env shows more.",
    ),
)
TIMEOUT = Cause(
    "timeout",
    "the server did not become healthy in time",
    (),
    "It may still be loading: raise sglang_service_health_timeout, or look at the journal for where it stopped.",
)
UNKNOWN = Cause(
    "unknown", "the server exited for a reason not recognised", (), "Read the journal lines quoted above (journalctl -u UNIT)."
)
_ERRORISH = re.compile(r"(error|exception|traceback|fatal|killed)", re.IGNORECASE)


@dataclass(frozen=True)
class Diagnosis:
    cause: str
    title: str
    advice: str
    lines: list[str] = field(default_factory=list)

    def message(self) -> str:
        quoted = "\n".join(f"  | {line}" for line in self.lines) or "  | (the journal is empty)"
        return f"Cause: {self.title}.\n{quoted}\nWhat to do: {self.advice}"

    def to_dict(self) -> dict[str, object]:
        return {"cause": self.cause, "title": self.title, "advice": self.advice, "lines": self.lines}


def diagnose(journal: str, *, timed_out: bool = False, max_lines: int = 6) -> Diagnosis:
    """Classify a failed start from its journal (the unit's own invocation only)."""
    lines = _servers_own([line.rstrip() for line in journal.splitlines() if line.strip()])
    for cause in CAUSES:
        hits = [line for line in lines if any(p.search(line) for p in cause.patterns)]
        if hits:
            return Diagnosis(cause.key, cause.title, cause.advice, _dedupe(hits)[-max_lines:])
    chosen = TIMEOUT if timed_out else UNKNOWN
    errorish = [line for line in lines if _ERRORISH.search(line)]
    return Diagnosis(chosen.key, chosen.title, chosen.advice, (errorish or lines)[-max_lines:])


def _servers_own(lines: list[str]) -> list[str]:
    """The journal without the power limit helper's own start-up (defaults.POWER_LIMIT_HELPER, the unit's
    ExecStopPost): systemd may fail to spawn it once the crashed server's cgroup is gone ("Failed to attach to
    cgroup", then "Failed at step CGROUP spawning" the helper), which says nothing of why the server failed."""
    kept: list[str] = []
    for line in lines:
        if defaults.POWER_LIMIT_HELPER in line:
            if kept and "Failed to attach to cgroup" in kept[-1]:
                kept.pop()
            continue
        kept.append(line)
    return kept


def _dedupe(lines: list[str]) -> list[str]:
    seen: set[str] = set()
    return [line for line in lines if not (line in seen or seen.add(line))]
