"""Multi-node layouts: the declaration, the rank of each host, the rendered command, the comparison of nodes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from sglang_layout import command, diagnosis, nodes, parallel
from sglang_layout.errors import DeclarationError
from sglang_layout.schema import parse_layout
from tests.unit import specs

GROUPS = {"all": ["a", "b", "c"], "pair": ["a", "b"], "trio": ["a", "b", "c"]}
TP16 = {"tp": 16, "nnodes": 2, "nodes": "pair"}


def filter_plugins() -> dict:
    """The project's Ansible filters, loaded as Ansible loads them (by path)."""
    path = Path(__file__).resolve().parents[2] / "plugins" / "filter" / "sglang.py"
    spec = importlib.util.spec_from_file_location("sglang_filters", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FilterModule().filters()


def test_a_two_node_layout_uses_half_its_gpus_on_each_node():
    layout = parse_layout("tp16", TP16)
    assert (layout.gpus_used, layout.gpus_per_node, layout.nnodes, layout.nodes) == (16, 8, 2, "pair")
    assert command.cuda_visible_devices(layout) == "0,1,2,3,4,5,6,7"
    assert parallel.check_parallel(layout, 8, 384) == []


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        ({"tp": 16, "nnodes": 2}, "sglang_layouts.x.nodes", "no inventory group of hosts is named"),
        ({"tp": 8, "nodes": "pair"}, "sglang_layouts.x.nodes", "is set but nnodes is 1"),
        ({"tp": 16, "nnodes": "2", "nodes": "pair"}, "sglang_layouts.x.nnodes", "must be a whole number"),
        ({"tp": 16, "nnodes": 0, "nodes": "pair"}, "sglang_layouts.x.nnodes", "must be at least 1"),
        ({"tp": 16, "nnodes": 2, "nodes": "pair --node-rank 0"}, "sglang_layouts.x.nodes", "inventory group name"),
        ({"tp": 16, "args": {"nnodes": 2}}, "sglang_layouts.x.args.nnodes", "rendered by the project from `nnodes`"),
        ({"tp": 16, "args": {"node-rank": 1}}, "sglang_layouts.x.args.node-rank", "rendered by the project"),
        ({"tp": 16, "args": {"nccl-init-addr": "h:1"}}, "sglang_layouts.x.args.nccl-init-addr", "--dist-init-addr"),
        ({"tp": 16, "args": {"dist-init": "h:1"}}, "sglang_layouts.x.args.dist-init", "--dist-init-addr"),
    ],
)
def test_bad_spans_and_smuggled_node_flags_are_refused_naming_the_field(spec, field, words):
    with pytest.raises(DeclarationError) as caught:
        parse_layout("x", spec)
    assert str(caught.value).startswith(field) and words in str(caught.value) and "Fix:" in str(caught.value)


def test_ranks_follow_the_groups_inventory_order_and_only_its_hosts_take_part():
    hosts = nodes.span_hosts("sglang_layouts.tp16", 2, "pair", GROUPS, "b")
    assert hosts == ["a", "b"]
    assert nodes.span_hosts("sglang_layouts.ep8", 1, "", GROUPS, "c") == ["c"]
    address = nodes.dist_init_addr("10.0.0.1", "20000")
    assert [nodes.place(2, hosts, host, address).rank for host in hosts] == [0, 1]
    with pytest.raises(DeclarationError, match="is not one of the layout's nodes"):
        nodes.place(2, hosts, "c", address)
    with pytest.raises(DeclarationError, match="holds 3 host"):
        nodes.span_hosts("sglang_layouts.tp16", 2, "trio", GROUPS, "a")
    with pytest.raises(DeclarationError, match="is not a group of the inventory"):
        nodes.span_hosts("sglang_layouts.tp16", 2, "quad", GROUPS, "a")


def test_a_declared_layouts_span_is_its_group_or_this_host_alone():
    layouts = {"tp16": TP16, "ep8": {"tp": 8, "ep": 8}}
    assert nodes.layout_span(layouts, "tp16", GROUPS, "c") == ["a", "b"]  # whichever host asks
    assert nodes.layout_span(layouts, "ep8", GROUPS, "c") == ["c"]
    assert nodes.layout_span(layouts, "undeclared", GROUPS, "c") == ["c"]  # preflight names it
    with pytest.raises(DeclarationError, match="nnodes is 2 but no inventory group"):
        nodes.layout_span({"tp16": {"tp": 16, "nnodes": 2}}, "tp16", GROUPS, "a")


def test_the_dist_init_address_is_checked_and_ipv6_is_bracketed():
    assert nodes.dist_init_addr("fd00::1", 20000) == "[fd00::1]:20000"
    assert nodes.dist_init_addr("gpu-box-1", 5000) == "gpu-box-1:5000"
    for bad_address, bad_port in (("a b", 1), ("10.0.0.1", 0), ("10.0.0.1 --port 1", 1), ("10.0.0.1", "x")):
        with pytest.raises(DeclarationError):
            nodes.dist_init_addr(bad_address, bad_port)


def test_every_node_runs_the_same_command_but_its_rank():
    layout = parse_layout("tp16", TP16)
    address = nodes.dist_init_addr("10.0.0.1", 20000)
    commands = [specs.spec(layout, node=nodes.place(2, ["a", "b"], host, address)).argv for host in ("a", "b")]
    at = commands[0].index("--nnodes")
    assert commands[0][at : at + 6] == ["--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "10.0.0.1:20000"]
    assert commands[1][at : at + 6] == ["--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.1:20000"]
    assert commands[0][:at] == commands[1][:at] and commands[0][at + 4 :] == commands[1][at + 4 :]


def test_nodes_that_differ_are_named_with_each_value():
    alike = {"gpus": {"count": 8, "name": "RTX", "memory_gib": 94.97, "driver_version": "580"}}
    summaries = {
        "a": nodes.node_summary(alike["gpus"], "0.5.23", "sha1 x"),
        "b": nodes.node_summary({**alike["gpus"], "memory_gib": 47.5, "driver_version": "590"}, "0.5.22", "sha1 x"),
    }
    problems, notes = nodes.differences(summaries)
    assert problems == [
        "GPUs (count x name, memory) differ: a has 8 x RTX, 94.97 GiB; b has 8 x RTX, 47.5 GiB",
        "SGLang version differ: a has 0.5.23; b has 0.5.22",
    ]
    assert notes == ["NVIDIA driver differ: a has 580; b has 590"]
    assert nodes.differences({"a": summaries["a"], "b": summaries["a"]}) == ([], [])


def test_the_filters_span_refuses_a_missing_group_before_anything_runs():
    span = filter_plugins()["sglang_node_span"]
    assert span({"tp16": TP16}, "tp16", GROUPS, "b") == {"nnodes": 2, "hosts": ["a", "b"]}
    assert span({"ep8": {"tp": 8}}, "ep8", GROUPS, "c") == {"nnodes": 1, "hosts": ["c"]}
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match=r"sglang_layouts\.tp16\.nodes = 'duo': is not a group of the inventory"):
        span({"tp16": {**TP16, "nodes": "duo"}}, "tp16", GROUPS, "a")


@pytest.mark.parametrize(
    ("journal", "cause"),
    [
        (
            "[rank0]:[E ProcessGroupNCCL.cpp:1875] [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread "
            "terminated with exception: NCCL error: remote process exited or there was a network error, NCCL version 2.27.3\n"
            "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\n"
            "socketProgress: Connection closed by remote peer 10.0.0.2<41234>",
            "peer_lost",
        ),
        (
            "[c10d] The client socket has timed out after 600000ms while trying to connect to (10.0.0.1, 20000).\n"
            "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while trying to connect to "
            "(10.0.0.1, 20000).",
            "rendezvous",
        ),
        ("torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.", "rendezvous"),
        (
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
            "port: 20000, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
            "port",
        ),
    ],
)
def test_multi_node_failures_are_told_apart(journal, cause):
    assert diagnosis.diagnose(journal).cause == cause
