"""The systemd sandbox a GPU server can live with: the defaults, and the overrides a declaration may make.

Each directive below is on by default; `sglang_service_hardening` (all layouts) and a
layout's `hardening:` (that layout) override one by name, and `null` drops it.
Only the directives named here can be set, so an override cannot add an
`ExecStartPre=` or any other command to the unit.

What a GPU server needs, and why some knobs stay off:
- the NVIDIA device nodes (DevicePolicy=closed + DeviceAllow by driver name), so no
  PrivateDevices (it hides /dev/nvidia*);
- /dev/shm for NCCL (untouched by ProtectSystem) and LimitMEMLOCK=infinity for pinned memory;
- no MemoryDenyWriteExecute: Triton and the other JIT kernels map code they just wrote;
- no PrivateUsers: the GPU device groups (video, render) would not map into the namespace.
SystemCallFilter uses the @system-service set with EPERM instead of a kill, so a call
outside it fails with an error in the journal instead of a silent SIGSYS.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sglang_layout import text

HardeningValue = str | tuple[str, ...]

# systemd major-device names from /proc/devices: nvidia-frontend covers /dev/nvidia[0-9]*,
# /dev/nvidiactl and /dev/nvidia-modeset; nvidia-uvm covers nvidia-uvm and nvidia-uvm-tools.
NVIDIA_DEVICES = ("char-nvidia-frontend rw", "char-nvidia-uvm rw", "char-nvidia-caps rw")


def defaults(state_dir: str) -> dict[str, HardeningValue]:
    """The sandbox of every unit; the state directory (caches of Triton, FlashInfer, torch) stays writable."""
    return {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ReadWritePaths": (state_dir,),
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "ProtectKernelTunables": "yes",
        "ProtectKernelModules": "yes",
        "ProtectKernelLogs": "yes",
        "ProtectControlGroups": "yes",
        "ProtectClock": "yes",
        "ProtectHostname": "yes",
        "ProtectProc": "invisible",
        "RestrictSUIDSGID": "yes",
        "LockPersonality": "yes",
        "RestrictRealtime": "yes",
        "RestrictNamespaces": "yes",
        "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6 AF_NETLINK",
        "SystemCallArchitectures": "native",
        "SystemCallFilter": "@system-service",
        "SystemCallErrorNumber": "EPERM",
        "CapabilityBoundingSet": "",
        "AmbientCapabilities": "",
        "RemoveIPC": "yes",
        "UMask": "0077",
        "DevicePolicy": "closed",
        "DeviceAllow": NVIDIA_DEVICES,
        "LimitMEMLOCK": "infinity",
    }


# Directives an override may set: the defaults' and a few more sandbox knobs. Nothing that runs a command.
ALLOWED = frozenset(
    {
        *defaults("/").keys(),
        "ReadOnlyPaths",
        "InaccessiblePaths",
        "PrivateIPC",
        "ProcSubset",
        "IPAddressAllow",
        "IPAddressDeny",
        "LimitNOFILE",
        "MemoryDenyWriteExecute",
        "PrivateNetwork",
    }
)


# Capabilities an override may grant the server, each with why a real SGLang may need it. Anything else
# (CAP_SYS_ADMIN, CAP_SETUID, CAP_DAC_OVERRIDE, ...) is refused: relaxing the sandbox is the user's call,
# granting privileges beyond these is not a setting this project offers.
GRANTABLE = {
    "CAP_SYS_PTRACE": (
        "CUDA memory handles passed between the server's own ranks with pidfd_getfd (flashinfer's MNNVL "
        "all-to-all on x86_64) need ptrace permission over a sibling process, which Yama's ptrace_scope=1 "
        "refuses without it"
    ),
}
CAPABILITY_DIRECTIVES = ("AmbientCapabilities", "CapabilityBoundingSet")


def _value(path: str, value: Any) -> HardeningValue | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        if len(value) > 64:
            raise text.refuse(path, f"{len(value)} items", "at most 64 items", "shorten the list")
        return tuple(_value(f"{path}[{i}]", item) or "" for i, item in enumerate(value) if item is not None)  # type: ignore[misc]
    checked = text.plain_text(path, value, max_length=1024, fix="write the value on one line")
    if checked.endswith("\\"):  # systemd joins the next unit line onto a line ending in a backslash
        raise text.refuse(path, value, "ends in a backslash: systemd would read the next unit line as part of it", "drop it")
    return checked


def parse_overrides(path: str, raw: Any) -> dict[str, HardeningValue | None]:
    """Overrides by directive name; a value of null drops the directive."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise text.refuse(path, raw, "must be a mapping of systemd directive to value", "write e.g. {SystemCallFilter: null}")
    result: dict[str, HardeningValue | None] = {}
    for name, value in raw.items():
        if name not in ALLOWED:
            raise text.refuse(
                f"{path}.{name}",
                value,
                "is not one of the sandbox directives a declaration may set",
                f"use one of {', '.join(sorted(ALLOWED))}",
            )
        result[name] = _value(f"{path}.{name}", value)
        if name in CAPABILITY_DIRECTIVES:
            _refuse_privileges(f"{path}.{name}", name, result[name])
    return result


def capabilities(value: HardeningValue | None) -> list[str]:
    """The capability names of an AmbientCapabilities= or CapabilityBoundingSet= value ('' or None: none)."""
    items = value if isinstance(value, tuple) else (value or "",)
    return [word.upper() for item in items for word in item.replace(",", " ").split()]


def _refuse_privileges(path: str, name: str, value: HardeningValue | None) -> None:
    fix = f"grant only {', '.join(GRANTABLE)} (docs/security.md says why each), or leave {name} as it is"
    if value is None and name == "CapabilityBoundingSet":
        raise text.refuse(path, None, "dropping it would leave the server every capability's bound", fix)
    granted = capabilities(value)
    if any(word.startswith("~") for word in granted):
        raise text.refuse(path, value, "an inverted list (~) grants every capability it does not name", fix)
    refused = [cap for cap in granted if cap not in GRANTABLE]
    if refused:
        raise text.refuse(path, value, f"would grant {', '.join(refused)} to the server", fix)


def granted(directives: Mapping[str, HardeningValue]) -> dict[str, str]:
    """The capabilities a unit's sandbox grants its server (ambient), with why each may be needed."""
    return {cap: GRANTABLE.get(cap, "not on the grantable list") for cap in capabilities(directives.get("AmbientCapabilities"))}


def merged(state_dir: str, *overrides: Mapping[str, HardeningValue | None]) -> dict[str, HardeningValue]:
    """The defaults with each override applied in turn (later wins; None drops)."""
    result: dict[str, HardeningValue | None] = dict(defaults(state_dir))
    for override in overrides:
        result.update(override)
    return {name: value for name, value in result.items() if value is not None}


def unit_lines(directives: Mapping[str, HardeningValue]) -> list[str]:
    """Directive=value lines for [Service]; a tuple is one line per item; '%' is escaped (no specifiers)."""
    lines = []
    for name, value in directives.items():
        for item in value if isinstance(value, tuple) else (value,):
            lines.append(f"{name}={item.replace('%', '%%')}")
    return lines
