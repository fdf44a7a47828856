"""`--layouts auto`: every parallel shape a host's GPUs allow under SGLang's nesting (pure).

SGLang runs dp replicas of a pp x tp group (GPUs used = dp x tp x pp); EP is carved out of TP (ep
divides tp) and adds no GPU; attention data parallelism (`attn-dp-size`, for models whose attention
SGLang can split that way: MLA's, as DeepSeek's and Kimi's) is carved out of TP as well. Every shape
that uses all the host's GPUs is listed, whether or not it fits: preflight and the installed SGLang's
own checks judge each one like a declared layout, so a refusal comes from a rule, never from a name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sglang_layout.errors import DeclarationError

AUTO = "auto"
MAX_AUTO_GPUS = 64  # the shapes grow with the divisors: 64 GPUs give a few hundred


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def shape_name(tp: int, ep: int = 1, pp: int = 1, dp: int = 1, attn_dp: int = 1) -> str:
    """`tp8-ep4`, `pp8`, `tp4-pp2`, `tp2-dp4`, `tp8-ep8-attn-dp8`: the sizes above 1, tp always."""
    parts = [f"tp{tp}"] if tp > 1 or (pp == 1 and dp == 1) else []
    parts += [f"{key}{size}" for key, size in (("ep", ep), ("pp", pp), ("dp", dp), ("attn-dp", attn_dp)) if size > 1]
    return "-".join(parts)


def shapes(gpu_count: int, *, attention_dp: bool) -> dict[str, dict[str, Any]]:
    """Every shape on `gpu_count` GPUs, as sglang_layouts entries by canonical name, widest tp first."""
    if not 1 <= gpu_count <= MAX_AUTO_GPUS:
        raise DeclarationError(
            "--layouts auto",
            str(gpu_count),
            f"a host with {gpu_count} GPUs",
            f"name the layouts; auto covers 1 to {MAX_AUTO_GPUS}",
        )
    found: dict[str, dict[str, Any]] = {}
    for tp in sorted(_divisors(gpu_count), reverse=True):
        for pp in _divisors(gpu_count // tp):
            dp = gpu_count // tp // pp
            for ep in _divisors(tp):
                widths = [1, *(d for d in _divisors(tp) if d > 1)] if attention_dp and pp == 1 and dp == 1 else [1]
                for attn_dp in widths:
                    entry: dict[str, Any] = {"description": "a shape of --layouts auto", "tp": tp}
                    entry.update({key: size for key, size in (("ep", ep), ("pp", pp), ("dp", dp)) if size > 1})
                    if attn_dp > 1:
                        entry["args"] = {"attn-dp-size": attn_dp}
                    found[shape_name(tp, ep, pp, dp, attn_dp)] = entry
    return found


def with_auto(
    declared: Mapping[str, Any], chosen: list[str] | None, gpu_count: int, *, attention_dp: bool
) -> tuple[dict[str, Any], list[str]]:
    """The declaration's layouts plus the auto shapes, and the chosen names with `auto` replaced by the shapes'.

    A shape with the name of a declared layout of the same sizes is that layout (its args and env apply);
    a declared layout with a shape's name but other sizes would make the name lie, and is refused."""
    names = list(chosen or [])
    if AUTO not in names:
        return dict(declared), names
    generated = shapes(gpu_count, attention_dp=attention_dp)
    layouts = dict(declared)
    for name, entry in generated.items():
        if name not in declared:
            layouts[name] = entry
            continue
        mine = declared[name] if isinstance(declared[name], Mapping) else {}
        sizes = {key: int(mine.get(key) or 1) for key in ("tp", "ep", "pp", "dp")}
        if sizes != {key: int(entry.get(key) or 1) for key in ("tp", "ep", "pp", "dp")}:
            raise DeclarationError(
                f"sglang_layouts.{name}",
                ", ".join(f"{k} {v}" for k, v in sizes.items()),
                f"the name of an auto shape with other sizes ({name})",
                "rename the layout, or drop auto from --layouts",
            )
    at = names.index(AUTO)
    expanded = [*names[:at], *generated, *names[at + 1 :]]
    return layouts, list(dict.fromkeys(expanded))
