"""The Python/Ansible seam (benchmarks/seam.py) against the playbooks and roles as written: a rename on either side
fails here, at unit-test time, not on a box."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from benchmarks import seam
from benchmarks.workload import Workload
from tests.conftest import REPO

PLAYBOOK_FILES = [*sorted((REPO / "playbooks").rglob("*.yml")), REPO / "deploy.yml"]
# The user's inventory sets these for a load-generator fleet (docs/benchmarks.md); benchmarks/ never passes them.
INVENTORY_VARS = {"bench_master_port", "bench_loadgen_address"}
ROLE_FILES = sorted((REPO / "roles").rglob("*.yml"))
BENCH_NAME = re.compile(r"\bbench_[a-z_]+\b")


def tasks(node: Any) -> Iterator[dict]:
    """Every task-like mapping in a playbook or task file, blocks and plays included."""
    if isinstance(node, list):
        for item in node:
            yield from tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in ("tasks", "pre_tasks", "post_tasks", "handlers", "block", "rescue", "always"):
            yield from tasks(node.get(key))


def all_tasks() -> Iterator[tuple[Path, dict]]:
    for path in PLAYBOOK_FILES + ROLE_FILES:
        for task in tasks(yaml.safe_load(path.read_text())):
            yield path, task


def stats_tasks() -> list[tuple[Path, dict]]:
    return [(path, task) for path, task in all_tasks() if "ansible.builtin.set_stats" in task]


def test_every_stats_key_the_playbooks_set_is_named_and_every_named_one_is_set():
    keys = {key for _, task in stats_tasks() for key in task["ansible.builtin.set_stats"]["data"]}
    assert keys == set(seam.STATS)


def test_the_swap_report_has_the_fields_the_table_names():
    (swap,) = [task for _, task in stats_tasks() if seam.SWAPS in task["ansible.builtin.set_stats"]["data"]]
    (report,) = swap["vars"].values()
    assert tuple(report) == seam.SWAP_FIELDS


def test_the_extra_vars_python_passes_are_read_and_the_playbooks_read_none_it_does_not_pass_or_default():
    text = "\n".join(path.read_text() for path in PLAYBOOK_FILES)
    used = set(BENCH_NAME.findall(text))
    defined = set(re.findall(r"^\s*(bench_[a-z_]+):", text, re.MULTILINE)) | set(re.findall(r"loop_var: (bench_[a-z_]+)", text))
    workload = set(Workload(levels=(1, 4)).extravars())
    given = {*seam.BENCH_VARS, *workload, *seam.STATS, *INVENTORY_VARS}
    assert used - defined - given == set(), "read by a playbook, never passed by benchmarks/ nor defaulted there"
    assert set(seam.BENCH_VARS) - used == set() and workload - used == set(), "passed by benchmarks/, read by no playbook"
    # And benchmarks/ passes no bench_ name the table lacks (the workload's come from its own field table).
    spelled = set(re.findall(r"\"(bench_[a-z_]+)\"", (REPO / "benchmarks" / "sweep.py").read_text()))
    assert spelled - set(seam.BENCH_VARS) == set()


def test_the_modules_and_facts_python_reads_exist_and_the_roles_use_them():
    used = {key.removeprefix("ansible.builtin.") for _, task in all_tasks() for key in task}
    for action in seam.ACTIONS:
        assert (REPO / "plugins" / "modules" / f"{action}.py").exists() or (REPO / "plugins" / "action" / f"{action}.py").exists()
        assert action in used, f"no task runs {action}"
    roles = "\n".join(path.read_text() for path in ROLE_FILES)
    for fact in seam.FACTS:
        assert re.search(rf"\b{fact}\b", roles), f"no role sets {fact}"
    for path in (seam.DEPLOY, seam.PREFLIGHT, seam.BENCHMARK, seam.BENCHMARK_STOP, seam.LEVEL_TASKS):
        assert (REPO / path).is_file(), path
    playbooks = "\n".join(path.read_text() for path in PLAYBOOK_FILES)
    for name in seam.DEPLOY_VARS:
        assert re.search(rf"\b{name}\b", playbooks + roles), name


def test_benchmarks_spells_none_of_the_seams_names_itself():
    names = (*seam.STATS, *seam.ACTIONS, *seam.FACTS, seam.DEPLOY, seam.PREFLIGHT, seam.BENCHMARK, seam.BENCHMARK_STOP)
    names += (seam.LEVEL_TASKS,)
    for path in sorted((REPO / "benchmarks").rglob("*.py")):
        if path.name == "seam.py":
            continue
        text = path.read_text()
        spelled = [name for name in names if f'"{name}"' in text or f"'{name}'" in text]
        assert not spelled, f"{path.relative_to(REPO)} spells {spelled}: read them from benchmarks.seam"


def test_the_role_hands_over_exactly_the_secrets_sglang_layout_knows():
    """roles/sglang_service/vars/main.yml gathers the secrets for the credential file; sglang_layout.secrets turns
    them into flags and redacts them: one list, checked here, so a secret added on one side only fails."""
    from sglang_layout.secrets import SECRET_FIELDS, SECRET_KEYS

    role_vars = yaml.safe_load((REPO / "roles" / "sglang_service" / "vars" / "main.yml").read_text())
    assert set(role_vars["__sglang_service_secrets"]) == set(SECRET_FIELDS)
    assert {flag.replace("-", "_") for flag, _ in SECRET_FIELDS.values()} <= SECRET_KEYS
