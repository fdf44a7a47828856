"""playbooks/benchmark.yml's defaults for runs by hand are the workload's own (benchmarks/workload.py is the source)."""

from __future__ import annotations

import yaml

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
