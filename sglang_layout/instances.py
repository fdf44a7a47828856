"""Several servers on one machine: each is an inventory host (an "instance") with its own port and GPU slice.

An instance names its units (sglang-<slug>-<layout>.<instance>.service) and its record, so that its swap
stops only its own layouts; a host without an instance owns the whole machine (units without a suffix).
The rules are pure functions here; the role and the playbooks reach them through filters.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sglang_layout import text
from sglang_layout.errors import DeclarationError

# The same alphabet as the model slug: the name goes into unit file names and the record's file name.
INSTANCE_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")
FACT = "sglang_service"


def instance_name(raw: Any) -> str:
    """'' (the whole machine) or a checked instance name."""
    if raw is None or raw == "":
        return ""
    return text.matching(
        "sglang_instance",
        raw,
        INSTANCE_NAME,
        max_length=24,
        what="a short name of [a-z0-9-] (it names the units, sglang-<slug>-<layout>.<instance>.service)",
        fix="write e.g. r0, or leave it unset for a server that owns the whole machine",
    )


def unit_name(model_slug: str, layout_name: str, instance: str = "") -> str:
    return f"sglang-{model_slug}-{layout_name}{'.' + instance if instance else ''}.service"


def unit_pattern(instance: str) -> str:
    """The file names of one instance's units (for ansible.builtin.find with use_regex); layout names hold no dot."""
    return rf"^sglang-[a-z0-9-]+\.{re.escape(instance)}\.service$" if instance else r"^sglang-[a-z0-9-]+\.service$"


def fact_name(instance: str) -> str:
    """The local fact (facts.d) that records what an instance serves."""
    return f"{FACT}_{instance.replace('-', '_')}" if instance else FACT


def gpu_slice(raw: Any, gpu_count: int, field: str = "sglang_gpu_ids") -> list[int]:
    """The GPU indices an instance may use: all of the machine's when unset, else a checked list of distinct ones.

    Accepts a list of integers or the text "0,1,2,3" / "0-3" (how it arrives from -e or an INI inventory).
    """
    if raw is None or raw == "" or raw == []:
        return list(range(gpu_count))
    if isinstance(raw, str):
        raw = _expand(field, raw, gpu_count)
    if not isinstance(raw, list):
        raise text.refuse(field, raw, "must be a list of GPU indices", 'write e.g. [0, 1, 2, 3] or "0-3"')
    ids: list[int] = []
    for item in raw:
        if isinstance(item, bool) or not isinstance(item, (int, str)) or not str(item).strip().isdigit():
            raise text.refuse(field, raw, f"{item!r} is not a GPU index", "write e.g. [0, 1, 2, 3]")
        ids.append(int(str(item).strip()))
    if len(set(ids)) != len(ids):
        raise text.refuse(field, raw, "names a GPU twice", "list each GPU once")
    outside = [gpu for gpu in ids if gpu >= gpu_count]
    if outside:
        raise text.refuse(
            field,
            raw,
            f"GPU {', '.join(map(str, outside))} is not on this machine ({gpu_count} GPUs: 0-{gpu_count - 1})",
            "choose GPUs the machine has",
        )
    return ids


MAX_TEXT = 256  # "0,1,...,63" is 182 characters


def _expand(field: str, raw: str, gpu_count: int) -> list[int]:
    """ "0-3,6" -> [0, 1, 2, 3, 6], each range checked against the machine before it is expanded."""
    if len(raw) > MAX_TEXT:
        raise text.refuse(field, raw, f"is {len(raw)} characters long, more than {MAX_TEXT}", 'write ranges, e.g. "0-3"')
    ids: list[int] = []
    for part in raw.replace(" ", "").split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise text.refuse(field, raw, f"{part!r} is not a GPU index or range", 'write e.g. "0-3" or "4,5,6,7"')
        last = int(high) if dash else int(low)
        if last < int(low):
            raise text.refuse(field, raw, f"the range {part!r} runs backwards", f'write it low to high, e.g. "{high}-{low}"')
        if last >= gpu_count:
            raise text.refuse(
                field,
                raw,
                f"GPU {last} is not on this machine ({gpu_count} GPUs: 0-{gpu_count - 1})",
                "choose GPUs the machine has",
            )
        ids += list(range(int(low), last + 1))
    return ids


def machine_of(host_vars: Mapping[str, Any], host: str) -> str:
    """Which machine a host entry runs on: sglang_machine when set, else its address and SSH port."""
    if host_vars.get("sglang_machine"):
        return str(host_vars["sglang_machine"])
    return f"{host_vars.get('ansible_host') or host}:{host_vars.get('ansible_port') or 22}"


def conflicts(hostvars: Mapping[str, Mapping[str, Any]], hosts: list[str]) -> list[str]:
    """What two server entries on one machine would fight over: the whole machine, an instance name, a port, a GPU.

    Only the given hosts are compared (the play's); GPU slices are compared as declared (unset: every GPU).
    """
    seen: dict[str, list[tuple[str, str, int | None, set[int] | None]]] = {}
    problems: list[str] = []
    for host in hosts:
        own = hostvars.get(host, {})
        raw_ids = own.get("sglang_gpu_ids")
        try:
            instance = instance_name(own.get("sglang_instance"))
            ids = None if raw_ids in (None, "", []) else set(gpu_slice(raw_ids, 1 << 16))
        except DeclarationError as exc:
            problems.append(f"{host}: {exc}")
            continue
        port = own.get("sglang_port")
        for other, other_instance, other_port, other_ids in seen.setdefault(machine_of(own, host), []):
            if not instance or not other_instance:
                problems.append(
                    f"{host} and {other} are on the same machine but {other if instance else host} has no sglang_instance "
                    "(a server without one owns every GPU and unit there): give each an sglang_instance and its sglang_gpu_ids"
                )
                continue
            if instance == other_instance:
                problems.append(f"{host} and {other} are both instance {instance} of one machine: name them apart")
            if port is not None and str(port) == str(other_port):
                problems.append(f"{host} and {other} both listen on port {port} of one machine: give each its own sglang_port")
            if ids is None or other_ids is None or ids & other_ids:
                shared = ", ".join(map(str, sorted(ids & other_ids))) if ids and other_ids else "all"
                problems.append(f"{host} and {other} share GPU {shared} of one machine: give each its own sglang_gpu_ids")
        seen[machine_of(own, host)].append((host, instance, port, ids))
    return problems


def first_on_machine(hostvars: Mapping[str, Mapping[str, Any]], hosts: list[str], host: str) -> bool:
    """Whether `host` is the first of `hosts` on its machine (what the machine needs once, e.g. provisioning)."""
    machine = machine_of(hostvars.get(host, {}), host)
    return next(h for h in hosts if machine_of(hostvars.get(h, {}), h) == machine) == host
