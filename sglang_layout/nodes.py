"""Where a multi-node layout runs, and whether its hosts can run it together.

SGLang spans hosts itself (`--nnodes N --node-rank R --dist-init-addr HOST:PORT`):
every node runs the same command but its rank, all ranks meet at rank 0's
address, and only rank 0 serves the API (the others answer /health once their
part has loaded). Here a layout names the inventory group it spans; ranks
follow that group's order, so the same inventory always gives the same ranks.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sglang_layout import schema, text

# What must be equal on every node before their numbers mean one layout: (key, what it is).
MUST_MATCH = (
    ("gpus", "GPUs (count x name, memory)"),
    ("sglang_version", "SGLang version"),
    ("model", "model files (config.json and safetensors index)"),
)
MAY_DIFFER = (("driver", "NVIDIA driver"),)


@dataclass(frozen=True)
class NodePlace:
    """One host's part of a multi-node layout."""

    nnodes: int
    rank: int
    dist_init_addr: str  # rank 0's address and the declared port, HOST:PORT

    def flags(self) -> list[str]:
        return ["--nnodes", str(self.nnodes), "--node-rank", str(self.rank), "--dist-init-addr", self.dist_init_addr]


def span_hosts(layout_path: str, nnodes: int, group: str, groups: Mapping[str, Sequence[str]], host: str) -> list[str]:
    """The hosts a layout runs on, in rank order: its `nodes` group, or this host alone for one box."""
    if nnodes == 1:
        return [host]
    if group not in groups:
        raise text.refuse(
            f"{layout_path}.nodes",
            group,
            "is not a group of the inventory",
            f"add the group to the inventory with its {nnodes} hosts, rank 0 first",
        )
    hosts = [str(name) for name in groups[group]]
    if len(hosts) != nnodes:
        raise text.refuse(
            f"{layout_path}.nodes",
            group,
            f"holds {len(hosts)} host(s) ({', '.join(hosts) or 'none'}) but nnodes is {nnodes}",
            "make the group hold exactly nnodes hosts, or change nnodes",
        )
    return hosts


def layout_span(layouts: Mapping[str, Any], layout: str, groups: Mapping[str, Sequence[str]], host: str) -> list[str]:
    """The hosts a declared layout runs on, rank 0 first; a one-box layout (or an undeclared one) runs on `host` alone."""
    if layout not in layouts:
        return [host]  # preflight names the missing layout
    nnodes, group = schema.parse_span(f"sglang_layouts.{layout}", layouts[layout])
    return span_hosts(f"sglang_layouts.{layout}", nnodes, group, groups, host)


def dist_init_addr(address: Any, port: Any) -> str:
    """rank 0's address and the declared port, as SGLang's --dist-init-addr reads it (IPv6 in brackets)."""
    host = text.bind_address("sglang_node_address (of rank 0)", address)
    number = text.whole_number("sglang_dist_init_port", port, low=1, high=65535, example=20000, from_text=True)
    try:
        is_v6 = ipaddress.ip_address(host).version == 6
    except ValueError:
        is_v6 = False
    return f"[{host}]:{number}" if is_v6 else f"{host}:{number}"


def place(nnodes: int, hosts: Sequence[str], host: str, address: str) -> NodePlace | None:
    """This host's rank among `hosts` (None for a one-box layout)."""
    if nnodes == 1:
        return None
    if host not in hosts:
        raise text.refuse("node", host, f"is not one of the layout's nodes ({', '.join(hosts)})", "deploy it on those hosts")
    return NodePlace(nnodes=nnodes, rank=list(hosts).index(host), dist_init_addr=address)


def node_summary(gpus: Mapping[str, Any], sglang_version: Any, model_digest: Any) -> dict[str, str]:
    """What one node brings, in the words the comparison prints."""
    return {
        "gpus": f"{gpus.get('count', '?')} x {gpus.get('name', '?')}, {gpus.get('memory_gib', '?')} GiB",
        "driver": str(gpus.get("driver_version", "?")),
        "sglang_version": str(sglang_version or "?"),
        "model": str(model_digest or "missing"),
    }


def differences(summaries: Mapping[str, Mapping[str, str]]) -> tuple[list[str], list[str]]:
    """(problems, notes): what differs between the nodes, each naming every node's value.

    Problems make the layout's numbers meaningless or its start fail (rank 0's memory plan
    assumes every GPU is like its own); notes are worth knowing but not fatal.
    """

    def compare(keys: tuple[tuple[str, str], ...]) -> list[str]:
        found = []
        for key, what in keys:
            values = {host: summary.get(key, "?") for host, summary in summaries.items()}
            if len(set(values.values())) > 1:
                found.append(f"{what} differ: " + "; ".join(f"{host} has {value}" for host, value in values.items()))
        return found

    return compare(MUST_MATCH), compare(MAY_DIFFER)
