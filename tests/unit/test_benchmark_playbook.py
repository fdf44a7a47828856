"""The workload's options are defined once (benchmarks/workload.py): the playbook's defaults for runs by hand
and the locustfile's own defaults equal it, and both the playbook and the harness take its rendered options;
a level's own options are built once too (benchmarks/locust_command.py), for the playbook and the harness."""

from __future__ import annotations

import argparse
import inspect
import re
from dataclasses import fields

import configargparse  # Locust's own parser, which the locustfile's env_var= option needs
import yaml

from benchmarks import harness, locust_command
from benchmarks.workload import Workload
from tests.conftest import REPO


def test_the_playbooks_defaults_equal_the_workloads():
    plays = yaml.safe_load((REPO / "playbooks" / "benchmark.yml").read_text())
    defaults = plays[1]["vars"]
    expected = Workload(levels=[1]).extravars()
    scalars = {key: value for key, value in expected.items() if not isinstance(value, dict | list)}
    assert {key: defaults[key] for key in scalars} == scalars
    # The per-level counts and the levels themselves have no default: the by-hand command gives them.
    assert {"bench_levels", "bench_warmup", "bench_measured"}.isdisjoint(defaults)
    # By hand no workload options are passed, so the locustfile's defaults (equal to the workload's) apply.
    assert defaults["bench_locust_options"] == []


def test_the_locustfiles_defaults_equal_the_workloads(locustfile):
    parser = configargparse.ArgumentParser()
    locustfile._options(parser)
    parsed = vars(parser.parse_args([]))
    workload = Workload(levels=[1])
    assert {name: parsed[f"bench_{name}"] for name in Workload.LOCUST_FIELDS} == {
        name: getattr(workload, name) for name in Workload.LOCUST_FIELDS
    }


def test_the_workloads_options_are_rendered_once_and_parse_back_to_it(locustfile):
    workload = Workload(levels=[1], input_tokens=8, output_tokens=32, endpoint="generate", metrics_interval=0.0, seed=7)
    parser = configargparse.ArgumentParser()
    locustfile._options(parser)
    parsed = vars(parser.parse_args(workload.locust_options()))
    assert {name: parsed[f"bench_{name}"] for name in Workload.LOCUST_FIELDS} == {
        name: getattr(workload, name) for name in Workload.LOCUST_FIELDS
    }
    argv = harness._locust_argv("http://127.0.0.1:1", REPO / "r.jsonl", 32, 10, users=4, requests=16)
    assert [option for option in argv if option.startswith("--bench-input-tokens")] == ["--bench-input-tokens=8"]


def _level_task() -> dict:
    (block,) = [
        task for task in yaml.safe_load((REPO / "playbooks" / "tasks" / "benchmark_level.yml").read_text()) if "block" in task
    ]
    (task,) = [task for task in block["block"] if task["name"] == "Level | Run Locust at the concurrency"]
    return task


def test_the_playbook_and_the_harness_build_a_levels_command_with_one_builder(locustfile):
    """The keys the playbook hands the filter are the builder's parameters, every required one among them; what the
    harness builds parses back to the level it asked for; the filter takes Ansible's strings."""
    expression = _level_task()["vars"]["__bench_argv"]
    assert "| sglang_locust_level_options" in expression and "--bench-" not in expression
    keys = set(re.findall(r"'(\w+)':", expression))
    parameters = inspect.signature(locust_command.level_options).parameters
    required = {name for name, parameter in parameters.items() if parameter.default is inspect.Parameter.empty}
    assert required <= keys <= set(parameters), keys ^ set(parameters)

    parser = configargparse.ArgumentParser()
    locustfile._options(parser)
    argv = harness._locust_argv("http://127.0.0.1:1", REPO / "r.jsonl", 32, 10, users=4, requests=16)
    parsed, rest = parser.parse_known_args(argv[5:])
    assert (parsed.bench_requests, parsed.bench_warmup, parsed.bench_request_rate) == (16, -1, 0.0)
    assert {"--users=4", "--spawn-rate=4", "--run-time=10s", "--headless"} <= set(rest)

    from plugins.filter.bench import sglang_locust_level_options

    rendered = sglang_locust_level_options(
        {"users": "8", "run_time_s": "600", "host": "http://h:1", "records": "/r", "requests": "64"}
    )
    assert rendered == locust_command.level_options(users=8, run_time_s=600, host="http://h:1", records="/r", requests=64)


def test_the_cli_defaults_come_from_the_workloads_fields():
    parser = argparse.ArgumentParser()
    Workload.add_cli_args(parser)
    parsed = vars(parser.parse_args([]))
    for item in fields(Workload):
        if item.name in parsed and item.name != "levels":
            default = item.default_factory() if callable(item.default_factory) else item.default
            assert parsed[item.name] == default, item.name
